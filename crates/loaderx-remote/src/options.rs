//! The options of a remote open: loaderx's own keys, and the rest handed
//! to `object_store`'s builder for the URL's scheme.

use std::time::Duration;

/// How a remote store is read. Set through `storage_options` keys (see
/// [`RemoteOptions::take`]); the rest of the keys go to `object_store`.
#[derive(Debug, Clone)]
pub struct RemoteOptions {
    /// Longest wait for any one request, retries included (`timeout`,
    /// seconds; default 30): a server that stops answering gives an error
    /// naming the URL after this long, never a hang.
    pub timeout: Duration,
    /// Longest wait to connect (`connect_timeout`, seconds; default 10).
    pub connect_timeout: Duration,
    /// Retries of a request that failed in a way worth retrying: 5xx,
    /// 429/SlowDown, 408, a connection refused or reset (`max_retries`;
    /// default 10), with exponential backoff and jitter.
    pub max_retries: usize,
    /// First backoff between retries (`retry_backoff`, seconds; default
    /// 0.1); each later one is up to twice the last, at most 15 s.
    pub retry_backoff: Duration,
    /// Requests one gather has in flight at once (`concurrency`; default 32).
    pub concurrency: usize,
    /// Two byte ranges of one object at most this many bytes apart are
    /// fetched by one request (`coalesce_bytes`; default 1 MiB).
    pub coalesce_bytes: u64,
    /// Largest request a merge may build (`max_request_bytes`; default 16 MiB).
    pub max_request_bytes: u64,
    /// Bytes of the table fetched at a time (`table_page_bytes`; default
    /// 64 KiB), each page kept for the handle's life.
    pub table_page_bytes: u64,
    /// The local block cache's directory (`cache_dir`, or the environment
    /// variable `LOADERX_CACHE_DIR`; none by default: no cache).
    pub cache_dir: Option<std::path::PathBuf>,
    /// The most the cache directory holds (`cache_bytes`, or
    /// `LOADERX_CACHE_BYTES`; default 10 GiB), least recently used blocks
    /// evicted first.
    pub cache_bytes: u64,
    /// Bytes of each cached block (`cache_block_bytes`; default 1 MiB).
    pub cache_block_bytes: u64,
    /// The most bytes requested ahead of their reads and not read yet
    /// (`lookahead_bytes`; default 256 MiB; 0 reads nothing ahead): what a
    /// loader's lookahead may hold per store.
    pub lookahead_bytes: u64,
}

impl Default for RemoteOptions {
    fn default() -> Self {
        RemoteOptions {
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            max_retries: 10,
            retry_backoff: Duration::from_millis(100),
            concurrency: 32,
            coalesce_bytes: 1 << 20,
            max_request_bytes: 16 << 20,
            table_page_bytes: 64 << 10,
            cache_dir: std::env::var_os("LOADERX_CACHE_DIR")
                .filter(|v| !v.is_empty())
                .map(std::path::PathBuf::from),
            cache_bytes: std::env::var("LOADERX_CACHE_BYTES")
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(10 << 30),
            cache_block_bytes: 1 << 20,
            lookahead_bytes: 256 << 20,
        }
    }
}

/// loaderx's own keys, in the order documented.
pub const OWN_KEYS: [&str; 12] = [
    "timeout",
    "connect_timeout",
    "max_retries",
    "retry_backoff",
    "concurrency",
    "coalesce_bytes",
    "max_request_bytes",
    "table_page_bytes",
    "cache_dir",
    "cache_bytes",
    "cache_block_bytes",
    "lookahead_bytes",
];

impl RemoteOptions {
    /// Takes loaderx's own keys out of `options` (keys are matched
    /// without regard to case), leaving the rest for `object_store`.
    ///
    /// # Errors
    /// A message naming the key whose value is not understood.
    pub fn take(options: &mut Vec<(String, String)>) -> Result<RemoteOptions, String> {
        let mut out = RemoteOptions::default();
        let mut rest = Vec::new();
        for (key, value) in options.drain(..) {
            let k = key.to_ascii_lowercase();
            let secs = || -> Result<Duration, String> {
                let v = value.trim().trim_end_matches('s');
                v.parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && *s > 0.0 && *s < 1e9)
                    .map(Duration::from_secs_f64)
                    .ok_or_else(|| {
                        format!("storage option {key:?} must be a positive number of seconds, got {value:?}")
                    })
            };
            let count = |min: u64| -> Result<u64, String> {
                value
                    .trim()
                    .parse::<u64>()
                    .ok()
                    .filter(|&n| n >= min)
                    .ok_or_else(|| {
                        format!(
                            "storage option {key:?} must be a whole number >= {min}, got {value:?}"
                        )
                    })
            };
            match k.as_str() {
                "timeout" => out.timeout = secs()?,
                "connect_timeout" => out.connect_timeout = secs()?,
                "retry_backoff" => out.retry_backoff = secs()?,
                "max_retries" => out.max_retries = count(0)? as usize,
                "concurrency" => out.concurrency = count(1)?.min(1024) as usize,
                "coalesce_bytes" => out.coalesce_bytes = count(0)?,
                "max_request_bytes" => out.max_request_bytes = count(1)?,
                "table_page_bytes" => out.table_page_bytes = count(4096)?,
                "cache_dir" => {
                    out.cache_dir = (!value.is_empty()).then(|| std::path::PathBuf::from(&value));
                }
                "cache_bytes" => out.cache_bytes = count(0)?,
                "cache_block_bytes" => out.cache_block_bytes = count(4096)?,
                "lookahead_bytes" => out.lookahead_bytes = count(0)?,
                _ => rest.push((key, value)),
            }
        }
        *options = rest;
        Ok(out)
    }
}
