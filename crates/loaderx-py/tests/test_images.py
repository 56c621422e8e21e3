"""Image stores: JPEG/PNG records decoded on gather (``codec="jpeg"`` or
``"png"``), files kept as they are (``append_encoded``), the resized
``Images`` reader, and damaged images reported with their record."""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import numpy as np
import pytest

from loaderx.zrecord import Dense, Images, Ragged, ZrecordError

Image = pytest.importorskip("PIL.Image")


def picture(h: int, w: int, seed: int = 0) -> np.ndarray:
    """A smooth RGB image with some texture (JPEG-friendly, like a photo)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.stack(
        [
            128 + 80 * np.sin(x / (7 + seed) + y / 11),
            128 + 70 * np.cos(y / (5 + seed)),
            (x * 255 / max(w - 1, 1)),
        ],
        axis=-1,
    )
    img += rng.normal(0, 3, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def jpeg_bytes(a: np.ndarray, quality: int = 90) -> bytes:
    out = io.BytesIO()
    Image.fromarray(a).save(out, "JPEG", quality=quality)
    return out.getvalue()


def png_bytes(a: np.ndarray, mode: str | None = None) -> bytes:
    out = io.BytesIO()
    Image.fromarray(a, mode=mode).save(out, "PNG") if mode else Image.fromarray(a).save(out, "PNG")
    return out.getvalue()


def pil_rgb(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


@pytest.mark.parametrize("layout", ["hwc", "chw"])
def test_png_dense_round_trips_exactly(tmp_path: Path, layout: str) -> None:
    hwc = np.stack([picture(20, 36, s) for s in range(6)])
    arr = hwc if layout == "hwc" else np.ascontiguousarray(hwc.transpose(0, 3, 1, 2))
    shape = arr.shape[1:]
    with Dense.create(tmp_path / "d", np.uint8, shape, codec="png") as w:
        w.append(arr)
    r = Dense.open(tmp_path / "d")
    assert r.codec == "png" and r.is_image and r.item_shape == shape
    np.testing.assert_array_equal(r[:], arr)
    np.testing.assert_array_equal(r[[5, 0, 3]], arr[[5, 0, 3]])
    assert r.stats()["live_bytes"] < arr.nbytes


def test_jpeg_matches_pil_decoding_the_same_bytes(tmp_path: Path) -> None:
    images = [picture(48, 64, s) for s in range(5)]
    files = [jpeg_bytes(a, 90) for a in images]
    with Dense.create(tmp_path / "d", np.uint8, (48, 64, 3), codec="jpeg", quality=90) as w:
        w.append_encoded(files)
        w.append(np.stack(images))
    r = Dense.open(tmp_path / "d")
    assert len(r) == 10
    got = r[:5].astype(np.int16)
    want = np.stack([pil_rgb(f) for f in files]).astype(np.int16)
    # Two IDCT/upsampling implementations of the same bytes: a few levels
    # apart at most, less than one on average.
    diff = np.abs(got - want)
    assert diff.max() <= 8 and diff.mean() < 1.0, (diff.max(), diff.mean())
    # Arrays encoded by the store at quality 90 come back within JPEG's error.
    err = np.abs(r[5:].astype(np.int16) - np.stack(images).astype(np.int16))
    assert err.mean() < 4.0, err.mean()
    assert r.stats()["live_bytes"] < 10 * 48 * 64 * 3 / 3


def test_quality_is_the_writers_choice(tmp_path: Path) -> None:
    images = np.stack([picture(64, 64, s) for s in range(4)])
    sizes = {}
    for q in (30, 95):
        with Dense.create(tmp_path / f"q{q}", np.uint8, (64, 64, 3), codec="jpeg", quality=q) as w:
            assert w.quality == q
            w.append(images)
        sizes[q] = Dense.open(tmp_path / f"q{q}").stats()["live_bytes"]
    assert sizes[30] < sizes[95]
    w = Dense.open(tmp_path / "q30", writable=True, quality=95)
    w.append(images[:1])
    assert len(w) == 5 and w.quality == 95
    w.close()
    with pytest.raises(TypeError, match="quality"):
        Dense.open(tmp_path / "q30", writable=True, quality=9.5)
    # Ragged image stores take append_flat too (the arrays are encoded).
    with Ragged.create(tmp_path / "r", np.uint8, 3, codec="png") as g:
        flat = np.concatenate([images[0].reshape(-1), images[1][:10].reshape(-1)])
        g.append_flat(flat, [0, images[0].size, flat.size], [[64, 64, 3], [10, 64, 3]])
    r = Ragged.open(tmp_path / "r")
    np.testing.assert_array_equal(r[1], images[1][:10])


def test_files_are_checked_against_the_dense_shape(tmp_path: Path) -> None:
    w = Dense.create(tmp_path / "d", np.uint8, (16, 16, 3), codec="jpeg")
    good = jpeg_bytes(picture(16, 16))
    w.append_encoded([good])
    with pytest.raises(ZrecordError, match=r"record 1 \(of this append\) is a 8x16 JPEG image"):
        w.append_encoded([good, jpeg_bytes(picture(8, 16))])
    with pytest.raises(ZrecordError, match="not a JPEG or PNG file"):
        w.append_encoded([b"GIF89a not an image"])
    with pytest.raises(TypeError, match="str"):
        w.append_encoded(["photo.jpg"])
    with pytest.raises(TypeError, match="not one file"):
        w.append_encoded(good)
    assert len(w) == 1, "refused appends change nothing"
    w.close()


def test_image_codecs_need_uint8_rgb(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="uint8 RGB"):
        Dense.create(tmp_path / "a", np.float32, (8, 8, 3), codec="jpeg")
    with pytest.raises(ValueError, match="uint8 RGB"):
        Dense.create(tmp_path / "b", np.uint8, (8, 8, 4), codec="png")
    with pytest.raises(ValueError, match="uint8 RGB"):
        Ragged.create(tmp_path / "c", np.uint8, 2, codec="jpeg")
    with pytest.raises(ValueError, match="quality"):
        Dense.create(tmp_path / "e", np.uint8, (8, 8, 3), codec="jpeg", quality=101)
    raw = Dense.create(tmp_path / "f", np.uint8, (8, 8, 3), codec="raw")
    with pytest.raises(ValueError, match="image store"):
        raw.append_encoded([png_bytes(picture(8, 8))])
    raw.close()
    with pytest.raises(ValueError, match="image store"):
        Dense.open(tmp_path / "f", resize=(4, 4))


def test_ragged_images_of_any_size_and_colour_mode(tmp_path: Path) -> None:
    a, b = picture(30, 40, 1), picture(17, 9, 2)
    grey = picture(12, 14, 3)[..., 0]
    rgba = np.dstack([picture(10, 11, 4), np.full((10, 11), 7, np.uint8)])
    with Ragged.create(tmp_path / "r", np.uint8, 3, codec="png") as w:
        w.append([a, b])
        w.append_encoded([png_bytes(grey), png_bytes(rgba), jpeg_bytes(a)])
    r = Ragged.open(tmp_path / "r")
    got = r[:]
    assert [g.shape for g in got] == [(30, 40, 3), (17, 9, 3), (12, 14, 3), (10, 11, 3), (30, 40, 3)]
    np.testing.assert_array_equal(got[0], a)
    np.testing.assert_array_equal(got[1], b)
    np.testing.assert_array_equal(got[2], np.repeat(grey[..., None], 3, axis=2))
    np.testing.assert_array_equal(got[3], rgba[..., :3])
    np.testing.assert_array_equal(r.shapes([4]), [[30, 40, 3]])
    with pytest.raises(ZrecordError, match="RGB"):
        Ragged.open(tmp_path / "r", writable=True).append([picture(4, 4)[..., :2]])


def test_resize_reader_covers_and_centre_crops(tmp_path: Path) -> None:
    big = picture(60, 90, 5)
    with Ragged.create(tmp_path / "r", np.uint8, 3, codec="png") as w:
        w.append([big, picture(32, 32, 6), picture(20, 50, 7)])
    im = Ragged.open(tmp_path / "r", resize=(32, 32))
    assert isinstance(im, Images) and im.item_shape == (32, 32, 3) and len(im) == 3
    batch = im[:]
    assert batch.shape == (3, 32, 32, 3) and batch.dtype == np.uint8
    np.testing.assert_array_equal(batch[1], picture(32, 32, 6))  # same size: as decoded
    # PIL: scale the shorter side to 32 (bilinear, antialiased), crop the centre.
    scaled = Image.fromarray(big).resize((48, 32), Image.BILINEAR)
    want = np.asarray(scaled)[:, 8:40].astype(np.int16)
    assert np.abs(batch[0].astype(np.int16) - want).mean() < 3.0
    chw = Ragged.open(tmp_path / "r", resize=(32, 32), layout="chw")
    np.testing.assert_array_equal(chw[[0, 2]], batch[[0, 2]].transpose(0, 3, 1, 2))
    again = pickle.loads(pickle.dumps(chw))
    np.testing.assert_array_equal(again[2], chw[2])
    np.testing.assert_array_equal(im.__getitems__([2, 0]), batch[[2, 0]])
    with pytest.raises(ValueError, match="layout"):
        Ragged.open(tmp_path / "r", resize=(8, 8), layout="nhwc")
    with pytest.raises(TypeError, match="resize"):
        Ragged.open(tmp_path / "r", resize=32)
    im.close()
    chw.close()
    assert im.closed


def test_a_damaged_image_raises_naming_its_record(tmp_path: Path) -> None:
    files = [jpeg_bytes(picture(96, 96, s)) for s in range(4)]
    cut = files[2][: len(files[2]) * 3 // 4]  # headers intact, scan data cut
    with Dense.create(tmp_path / "d", np.uint8, (96, 96, 3), codec="jpeg") as w:
        w.append_encoded([files[0], files[1], cut, files[3]])
    r = Dense.open(tmp_path / "d")
    np.testing.assert_array_equal(r[[0, 1, 3]], np.stack([r[0], r[1], r[3]]))
    for read in (lambda: r[[1, 2]], lambda: r[2], lambda: Dense.open(tmp_path / "d", resize=(8, 8))[:]):
        with pytest.raises(ZrecordError) as err:
            read()
        assert err.value.code == -7
        assert "entry 2" in str(err.value) and "truncated" in str(err.value), str(err.value)


def test_loader_batches_decoded_images(tmp_path: Path) -> None:
    from loaderx import DataLoader

    images = np.stack([picture(16, 16, s) for s in range(12)])
    with Dense.create(tmp_path / "d", np.uint8, (16, 16, 3), codec="png") as w:
        w.append(images)
    with Ragged.create(tmp_path / "r", np.uint8, 3, codec="png") as w:
        w.append(list(images))
    dense = Dense.open(tmp_path / "d")
    small = Ragged.open(tmp_path / "r", resize=(8, 8))
    expect_small = small[:]
    with DataLoader({"img": dense, "small": small}, batch_size=4, seed=3) as loader:
        for _ in range(3):
            batch = next(loader)
            assert batch["small"].shape == (4, 8, 8, 3)
            for img, sm in zip(batch["img"], batch["small"]):
                k = next(i for i in range(12) if np.array_equal(images[i], img))
                np.testing.assert_array_equal(sm, expect_small[k])
    dense.close()
    small.close()


def test_image_folder_keeps_files_as_they_are(tmp_path: Path) -> None:
    from loaderx import converter

    root = tmp_path / "folder"
    (root / "cat").mkdir(parents=True)
    (root / "dog").mkdir()
    cats = [picture(20 + i, 30, i) for i in range(3)]
    for i, a in enumerate(cats):
        (root / "cat" / f"{i}.jpg").write_bytes(jpeg_bytes(a))
    dog = picture(10, 12, 9)
    (root / "dog" / "a.png").write_bytes(png_bytes(dog))
    counts = converter.convert_image_folder(root, tmp_path / "out", codec="zstd", keep_encoded=True)
    assert counts == {"label": 4, "image": 4}
    images = Ragged.open(tmp_path / "out" / "image")
    assert images.codec == "jpeg"
    got = images[:]
    assert [g.shape for g in got] == [(20, 30, 3), (21, 30, 3), (22, 30, 3), (10, 12, 3)]
    np.testing.assert_array_equal(got[3], dog)
    for g, f in zip(got[:3], sorted((root / "cat").iterdir())):
        assert np.abs(g.astype(np.int16) - pil_rgb(f.read_bytes())).mean() < 1.0
    # The store holds the files' bytes, not re-encoded ones.
    assert images.stats()["live_bytes"] == sum(
        p.stat().st_size for p in root.rglob("*") if p.is_file()
    )
    np.testing.assert_array_equal(Dense.open(tmp_path / "out" / "label")[:], [0, 0, 0, 1])
    assert Ragged.open(tmp_path / "out" / "image", resize=(8, 8))[:].shape == (4, 8, 8, 3)

    (root / "dog" / "b.jpg").write_bytes(b"not a jpeg")
    with pytest.raises(converter.ConversionError, match="b.jpg"):
        converter.convert_image_folder(root, tmp_path / "out2", codec="zstd", keep_encoded=True)
    assert not (tmp_path / "out2").exists()
    with pytest.raises(ValueError, match="keep_encoded"):
        converter.convert_image_folder(
            root, tmp_path / "out3", codec="zstd", keep_encoded=True, size=(8, 8)
        )


def noisy_gradient(h: int, w: int, seed: int) -> np.ndarray:
    """A colour gradient under strong noise: chroma detail at every pixel."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.stack([x * 255 / w + seed * 7, y * 255 / h + seed * 13, (x + y) * 255 / (h + w)], -1)
    return np.clip(img % 256 + rng.normal(0, 20, img.shape), 0, 255).astype(np.uint8)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float(10 * np.log10(255**2 / mse))


@pytest.mark.parametrize("kind", ["smooth", "noisy"])
def test_jpeg_encoding_is_as_good_as_pillows(tmp_path: Path, kind: str) -> None:
    # Arrays appended to a jpeg store at quality 90 against Pillow (libjpeg)
    # at the same quality and 4:2:0 subsampling: the same quality per image
    # (within 0.3 dB, median and worst) in no more bytes.
    make = picture if kind == "smooth" else noisy_gradient
    images = np.stack([make(96, 128, s) for s in range(16)])
    with Dense.create(tmp_path / "d", np.uint8, (96, 128, 3), codec="jpeg", quality=90) as w:
        w.append(images)
    r = Dense.open(tmp_path / "d")
    ours = [psnr(a, b) for a, b in zip(images, r[:])]
    files = []
    for a in images:
        out = io.BytesIO()
        Image.fromarray(a).save(out, "JPEG", quality=90, subsampling=2)
        files.append(out.getvalue())
    pils = [psnr(a, pil_rgb(f)) for a, f in zip(images, files)]
    assert np.median(ours) >= np.median(pils) - 0.3, (np.median(ours), np.median(pils))
    assert min(ours) >= min(pils) - 0.3, (min(ours), min(pils))
    assert r.stats()["live_bytes"] <= 1.02 * sum(map(len, files))
