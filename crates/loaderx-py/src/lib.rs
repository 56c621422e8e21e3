//! `loaderx._native`: the PyO3 extension under the `loaderx` Python package.
//!
//! It is the single source of the contract the Python layer exposes: the
//! package version (from Cargo), the record limit, the codec names, the
//! error codes and their meanings (`ERROR_CODES`), and the layout of a
//! sampler state and of a loader state (the sampler's plus the stream
//! names), both built, read and checked here, as dicts.
//!
//! Typed stores (format v2, the `Dense`/`Ragged` containers) are the same
//! `Store` class, created by `Store.create_typed` or opened by
//! `Store.open_existing`; module `typed` holds their schema, their limits
//! and dtype and codec names, and the reads that allocate their output.
//!
//! Three thin classes (private modules, so named rather than linked):
//! `store::Store` wraps a [`loaderx_store::Store`], `sampler::Sampler` a
//! [`loaderx_sampler::Sampler`], and `loader::Loader` a
//! [`loaderx_loader::Loader`] whose streams are such
//! stores (its workers gather through the same lock as Python callers, with
//! no GIL). The typed containers' index rules live in module
//! `indices`: a container's read is one call here, whatever its index
//! (ints, slices, masks, lists, arrays of any integer dtype), resolved and
//! gathered under one lock. This module releases the GIL for every call
//! that does real work, and turns engine errors into `loaderx.ZrecordError`
//! with their stable code (module `errors`).
//!
//! It never interprets record bytes, allocates output arrays only for typed
//! reads (which then reach NumPy without a copy, large ones from a pool of
//! recycled buffers per handle; byte-record reads fill what the caller
//! passes in), and never holds the GIL while it waits for a lock.
//!
//! Unsafe code is confined to four modules, each stating its invariant:
//! `pages` (memory advice on shared file mappings); `writer` (a write
//! behind the call reads the writer's own copies without the GIL); `pool` (the loader's
//! batch buffers and the large outputs of direct reads, anonymous mappings
//! on Linux, and the NumPy arrays that view them while a Python object
//! owns them); and `arrays`, which reads the memory of arrays handed over
//! in a list and of index arrays, and makes the new arrays of `Dense`'s
//! one-call batch read, which `Store::get_dense` (one `unsafe` call, bound
//! to fill every byte) gathers into before they are handed out.

#![deny(unsafe_code)]

mod args;
#[allow(unsafe_code)]
mod arrays;
mod collection;
#[allow(unsafe_code)]
mod dlpack;
mod errors;
mod indices;
mod loader;
#[allow(unsafe_code)]
mod pages;
#[allow(unsafe_code)]
mod pool;
mod sampler;
mod store;
mod typed;
#[allow(unsafe_code)]
mod writer;

use pyo3::prelude::*;
use pyo3::types::PyDict;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    loaderx_remote::set_interrupt_check(errors::interrupted);
    m.add_class::<store::Store>()?;
    m.add_function(wrap_pyfunction!(store::push, m)?)?;
    m.add_function(wrap_pyfunction!(store::first_object, m)?)?;
    m.add_function(wrap_pyfunction!(store::publish, m)?)?;
    m.add_class::<sampler::Sampler>()?;
    m.add_class::<loader::Loader>()?;
    m.add_class::<collection::Collection>()?;
    m.add_class::<collection::CollectionColumn>()?;
    m.add_function(wrap_pyfunction!(collection::collection_commit, m)?)?;
    m.add_function(wrap_pyfunction!(collection::collection_upload_part, m)?)?;
    m.add_function(wrap_pyfunction!(collection::collection_at_url, m)?)?;
    m.add_class::<dlpack::DlPackTensor>()?;
    m.add_function(wrap_pyfunction!(dlpack::import_dlpack, m)?)?;
    m.add_function(wrap_pyfunction!(sampler::loader_state, m)?)?;
    m.add_function(wrap_pyfunction!(sampler::sampler_state_of, m)?)?;
    m.add_function(wrap_pyfunction!(indices::as_indices, m)?)?;
    m.add_function(wrap_pyfunction!(pages::file_maps, m)?)?;
    m.add_function(wrap_pyfunction!(pages::release_pages, m)?)?;
    m.add_function(wrap_pyfunction!(pages::release_mapped, m)?)?;
    m.add("MAX_RECORD_LEN", loaderx_store::MAX_RECORD_LEN)?;
    m.add("POOLED_OUTPUT_BYTES", pool::POOLED_OUTPUT_BYTES)?;
    m.add_class::<pool::OutputPool>()?;
    let codecs = PyDict::new(py);
    for codec in loaderx_store::CodecId::ALL {
        codecs.set_item(codec.name(), codec.tag().0)?;
    }
    m.add("CODECS", codecs)?;
    m.add("ERROR_CODES", errors::error_codes(py)?)?;
    m.add("BEHIND_NOTE", writer::BEHIND_NOTE)?;
    typed::add_constants(m)?;
    args::add_functions(m)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
