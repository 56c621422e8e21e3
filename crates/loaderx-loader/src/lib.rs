//! An endless, prefetching batch loader over loaderx stores: background
//! threads gather every stream at the sampler's indices, and the training
//! loop takes ready batches in sampler order.
//!
//! * [`Loader`] is the consumer's handle: [`next`](Loader::next) (blocking),
//!   [`next_timeout`](Loader::next_timeout), [`recycle`](Loader::recycle),
//!   [`state`](Loader::state)/[`restore`](Loader::restore),
//!   [`close`](Loader::close). It is built by a [`LoaderBuilder`] from one
//!   `loaderx_sampler::Sampler` and one or more [`Stream`]s.
//! * A [`Stream`] is a named [`Source`] (any `loaderx_store::Store`, or a
//!   binding's wrapper around one) with a [`StreamKind`]: fixed-size records
//!   or ragged ones.
//! * A [`Batch`] holds one [`Column`] per stream, in buffers from a
//!   [`BufferAllocator`] ([`VecPool`] by default, which reuses recycled
//!   buffers).
//!
//! # How data flows
//!
//! Each of `num_workers` threads claims the next global step, computes its
//! indices with the sampler's pure `indices_at(step)`, gathers every stream
//! into buffers from the allocator, and drops the batch into a reorder window
//! of `prefetch` slots. The consumer takes step after step from the front of
//! the window, so batches come out in sampler order whatever the number of
//! workers, and a run is reproducible and resumable from
//! [`Loader::state`]. A worker may claim step `s` only while `s` is less than
//! `prefetch` steps past the next one to deliver, which bounds memory to
//! about `prefetch` batches plus what the consumer holds. Waiting is on
//! condition variables; closing wakes everyone.
//!
//! # What it never does
//!
//! It has no epochs and no length: the stream of batches is endless. It never
//! busy-polls, never hangs on shutdown (closing waits only for gathers
//! already under way), never delivers out of order, never stalls on an error
//! (a failed batch is returned as an `Err` in its place), never writes to a
//! store, and never interprets record bytes.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//!
//! use loaderx_loader::{Loader, Stream};
//! use loaderx_sampler::{Mode, Sampler};
//! use loaderx_store::Store;
//!
//! let dir = tempfile::tempdir()?;
//! let images: Arc<Store> = Arc::new(Store::open(dir.path().join("images"))?);
//! let labels: Arc<Store> = Arc::new(Store::open(dir.path().join("labels"))?);
//! let pixels: Vec<u8> = (0..100 * 64).map(|i| (i / 64) as u8).collect();
//! images.append_fixed(&pixels, 100, 64)?; // 100 images of 64 bytes
//! labels.append_fixed(&(0..100u8).collect::<Vec<_>>(), 100, 1)?;
//!
//! let sampler = Sampler::new(100, 8, Mode::Shuffle, 42)?;
//! let loader = Loader::builder(sampler)
//!     .stream(Stream::fixed("image", images, 64))
//!     .stream(Stream::fixed("label", labels, 1))
//!     .num_workers(2)
//!     .prefetch(4)
//!     .build()?;
//!
//! let batch = loader.next()?;
//! let (image, label) = (batch.column("image").unwrap(), batch.column("label").unwrap());
//! for i in 0..batch.len() {
//!     // Every stream was gathered at the same indices.
//!     assert_eq!(image.item(i), [label.item(i)[0]; 64]);
//! }
//! let resume_here = loader.state(); // the batch after this one
//! loader.recycle(batch);
//!
//! let next = loader.next()?;
//! assert_eq!(next.step(), resume_here.step);
//! loader.close(); // also done on drop
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![warn(clippy::pedantic)]
// Accessors and pure constructors: a `#[must_use]` on each is noise.
#![allow(clippy::must_use_candidate)]

mod allocator;
mod batch;
mod builder;
mod error;
mod loader;
mod source;
mod stream;
mod window;
mod worker;

pub use allocator::{BufferAllocator, VecPool};
pub use batch::{Batch, Column, Layout};
pub use builder::LoaderBuilder;
pub use error::{Error, Result};
pub use loader::Loader;
pub use source::Source;
pub use stream::{Stream, StreamKind};
