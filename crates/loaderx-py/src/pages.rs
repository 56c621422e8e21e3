//! Letting go of this process's pages of a memory-mapped source once what
//! was read from them is written: otherwise every page of a large input
//! read so far stays resident (converting a 2 GiB `np.load(...,
//! mmap_mode="r")` array, or a memory-mapped Hugging Face dataset, would
//! hold 2 GiB). The one implementation behind `Dense.append` and the
//! converters.
//!
//! The advice (`MADV_DONTNEED`) is given only for whole pages inside a
//! *shared file mapping*: a read-only mapping of a file listed in
//! `/proc/self/maps`, or the mapping of an `np.memmap` opened `"r"` or
//! `"r+"` (never `"c"`, a private copy-on-write map whose changes the advice
//! would discard). There it drops this process's page-table entries only:
//! the bytes stay in the file and the page cache, and a later read maps
//! them again. Anonymous and private memory is never advised (it would read
//! back as zeros). Linux only; elsewhere nothing is released.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

static MEMMAP: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static MMAP: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// A span of addresses, `[lo, hi)`.
type Span = (usize, usize);

/// The address ranges where this process maps `paths` read-only (from
/// `/proc/self/maps`; empty where that does not exist).
#[pyfunction]
pub(crate) fn file_maps(paths: Vec<std::path::PathBuf>) -> Vec<Span> {
    let wanted: Vec<std::path::PathBuf> = paths
        .iter()
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .collect();
    if wanted.is_empty() || !cfg!(target_os = "linux") {
        return Vec::new();
    }
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for line in maps.lines() {
        // Five fields, then the path (Python's `line.split(None, 5)`).
        let mut rest = line;
        let mut fields = [""; 5];
        for field in &mut fields {
            rest = rest.trim_start();
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            (*field, rest) = rest.split_at(end);
        }
        let [range, perms, ..] = fields;
        let file = rest.trim();
        if file.is_empty() || !perms.starts_with("r-") {
            continue;
        }
        let file = std::fs::canonicalize(file).ok();
        if !file.is_some_and(|f| wanted.contains(&f)) {
            continue;
        }
        let mut bounds = range.split('-').map(|x| usize::from_str_radix(x, 16));
        if let (Some(Ok(lo)), Some(Ok(hi))) = (bounds.next(), bounds.next()) {
            found.push((lo, hi));
        }
    }
    found.sort_unstable();
    found
}

/// Releases the pages of each `(address, size)` of `spans` that lies wholly
/// inside one of `maps` (from [`file_maps`]): the span widened to whole
/// pages, clipped to its map.
#[pyfunction]
pub(crate) fn release_pages(spans: Vec<(usize, usize)>, maps: Vec<Span>) {
    let page = page_size();
    for (start, size) in spans {
        let Some(end) = start.checked_add(size).filter(|_| size > 0) else {
            continue;
        };
        if let Some(&(lo, hi)) = maps.iter().find(|&&(lo, hi)| lo <= start && end <= hi) {
            let a = lo.max(start - start % page);
            let b = hi.min(end.saturating_add((page - end % page) % page));
            if a < b {
                dont_need(a, b - a);
            }
        }
    }
}

/// Releases the pages of `block` (an array viewing `source`) when `source`
/// is an `np.memmap` opened `"r"` or `"r+"`; nothing otherwise.
#[pyfunction]
pub(crate) fn release_mapped(source: &Bound<'_, PyAny>, block: &Bound<'_, PyAny>) -> PyResult<()> {
    let py = source.py();
    if !source.is_instance(MEMMAP.import(py, "numpy", "memmap")?)? {
        return Ok(());
    }
    let mode = source.getattr("mode")?;
    if !(mode.eq("r")? || mode.eq("r+")?) || block.getattr("base")?.is_none() {
        return Ok(());
    }
    let Ok(mm) = source.getattr("_mmap") else {
        return Ok(());
    };
    if !mm.is_instance(MMAP.import(py, "mmap", "mmap")?)? {
        return Ok(());
    }
    let address = |array: &Bound<'_, PyAny>| -> PyResult<usize> {
        array
            .getattr("__array_interface__")?
            .get_item("data")?
            .get_item(0)?
            .extract()
    };
    let numpy = py.import("numpy")?;
    let Ok(whole) = numpy.call_method1("frombuffer", (&mm, "u1")) else {
        return Ok(()); // a closed map
    };
    let lo = address(&whole)?;
    let hi = lo + whole.len()?;
    let start = address(block)?;
    let size: usize = block.getattr("nbytes")?.extract()?;
    release_pages(vec![(start, size)], vec![(lo, hi)]);
    Ok(())
}

#[cfg(target_os = "linux")]
fn page_size() -> usize {
    // SAFETY: sysconf only reads a system constant.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size)
        .ok()
        .filter(|&s| s > 0)
        .unwrap_or(4096)
}

#[cfg(not(target_os = "linux"))]
fn page_size() -> usize {
    4096
}

/// `MADV_DONTNEED` on `len` bytes at `addr`, page-aligned and inside a
/// shared file mapping (the callers above see to both). Advice only: a
/// failure is ignored.
#[cfg(target_os = "linux")]
fn dont_need(addr: usize, len: usize) {
    // SAFETY: the range is whole pages of a shared file mapping of this
    // process (module doc): dropping its page-table entries changes no
    // byte any reader sees (they are re-read from the page cache on the
    // next access), and an address outside any mapping is refused by the
    // kernel with ENOMEM.
    unsafe {
        libc::madvise(addr as *mut libc::c_void, len, libc::MADV_DONTNEED);
    }
}

#[cfg(not(target_os = "linux"))]
fn dont_need(_addr: usize, _len: usize) {}
