//! Times as the API shows them.

/// Formats unix milliseconds as RFC 3339. A time RFC 3339 cannot write (before 1970, after
/// the year 9999: a plugin's or an older server's) is shown as the nearest it can, never a
/// panic.
pub fn time(ms: i64) -> String {
    let ms = (ms.max(0) as u64).min(csivol_api::limits::MAX_TIME_MS);
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_millis(t).to_string()
}
