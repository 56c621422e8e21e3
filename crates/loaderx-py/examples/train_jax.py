"""Train a logistic-regression model in JAX on data converted with loaderx.

    python crates/loaderx-py/examples/train_jax.py --out target/train-jax
    python crates/loaderx-py/examples/train_jax.py --host-devices 2   # sharded batches

1. Makes a synthetic two-class problem and converts it with
   ``Dataset.write`` into two stores, ``x`` and ``y``.
2. A named-stream ``DataLoader`` gathers both in Rust threads. Its rank and
   world size default to ``jax.process_index()``/``jax.process_count()``
   when several JAX processes run, so every process receives its own share
   of each global batch.
3. With one local device each batch goes to it with ``jax.device_put``;
   with several (``--host-devices N`` fakes N CPU devices through
   ``XLA_FLAGS``), the process's share becomes one global array sharded over
   the devices along the batch axis with
   ``jax.make_array_from_process_local_data``, and the jitted step runs data
   parallel.

Exits non-zero if the model does not learn (accuracy below 90 %).
"""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

import numpy as np

FEATURES = 16


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("target/train-jax"))
    parser.add_argument("--records", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--host-devices", type=int, default=1)
    args = parser.parse_args()
    if args.host_devices > 1:
        # Must be set before JAX starts its CPU backend.
        os.environ["XLA_FLAGS"] = (
            os.environ.get("XLA_FLAGS", "")
            + f" --xla_force_host_platform_device_count={args.host_devices}"
        )
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from loaderx import Dataset
    from loaderx.dataloader import DataLoader

    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((args.records, FEATURES)).astype(np.float32)
    w_true = rng.standard_normal(FEATURES).astype(np.float32)
    y_np = (x_np @ w_true > 0).astype(np.float32)
    shutil.rmtree(args.out, ignore_errors=True)
    x = Dataset.write(args.out / "x", x_np, codec="zstd")
    y = Dataset.write(args.out / "y", y_np)

    def loss_fn(params: dict, xb: jax.Array, yb: jax.Array) -> jax.Array:
        logits = xb @ params["w"] + params["b"]
        return jnp.mean(jnp.logaddexp(0.0, logits) - yb * logits)

    @jax.jit
    def step(params: dict, xb: jax.Array, yb: jax.Array) -> dict:
        grads = jax.grad(loss_fn)(params, xb, yb)
        return jax.tree.map(lambda p, g: p - 0.5 * g, params, grads)

    devices = jax.local_devices()
    batch_size = 64 * len(devices) * jax.process_count()  # the global batch
    sharding = None
    if len(jax.devices()) > 1:
        mesh = Mesh(np.array(jax.devices()), ("batch",))
        sharding = NamedSharding(mesh, PartitionSpec("batch"))
    params = {"w": jnp.zeros(FEATURES), "b": jnp.zeros(())}
    with DataLoader({"x": x, "y": y}, batch_size=batch_size, transform_workers=2) as loader:
        for _ in range(args.steps):
            batch = next(loader)  # this process's share of the global batch
            if sharding is None:
                xb, yb = jax.device_put((batch["x"], batch["y"]))
            else:
                xb = jax.make_array_from_process_local_data(sharding, batch["x"])
                yb = jax.make_array_from_process_local_data(sharding, batch["y"])
                assert len(xb.sharding.device_set) == len(jax.devices())
            params = step(params, xb, yb)
    predictions = (x_np @ np.asarray(params["w"]) + float(params["b"])) > 0
    acc = float(np.mean(predictions == (y_np > 0)))
    layout = f"sharded over {len(jax.devices())} devices" if sharding else "on one device"
    print(f"loaderx DataLoader -> JAX ({layout}): accuracy {acc:.3f} after {args.steps} steps")
    x.close()
    y.close()
    if acc < 0.9:
        raise SystemExit(f"accuracy {acc:.3f} is below 0.9; training did not work")


if __name__ == "__main__":
    main()
