//! The texts of statements made from the store's column constants.

/// A statement's text formatted from constants once per process, not at every call: a row
/// read at every request then neither formats nor allocates its text before the statement
/// cache finds it. The text is kept, so only constants can be named in it.
macro_rules! fixed_sql {
    ($($format:tt)*) => {{
        static SQL: std::sync::LazyLock<String> =
            std::sync::LazyLock::new(|| format!($($format)*));
        SQL.as_str()
    }};
}

/// A statement on the claims table whose `{columns}` are the claim columns this schema has
/// (`drift::claim_columns`), each form's text formatted once per process.
macro_rules! claims_sql {
    ($conn:expr, $format:literal) => {
        if crate::store::sqlite::drift::kept($conn)? {
            fixed_sql!(
                $format,
                columns = crate::store::sqlite::drift::CLAIM_COLUMNS_WITH_DRIFT
            )
        } else {
            fixed_sql!(
                $format,
                columns = crate::store::sqlite::drift::CLAIM_COLUMNS
            )
        }
    };
}
