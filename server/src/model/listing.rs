//! A listing's rows as a store read them: a run of volumes with their claims and
//! attachments ([`VolumeChunk`]), the volume's fields borrowed from where they were read
//! ([`VolumeFields`]), and the raw rows themselves ([`StoredRows`]), copied while the read
//! transaction is held and decoded on another thread.

use std::collections::BTreeMap;

use csivol_api::domain::{AccessMode, Topology};
use csivol_api::{self as api};

use super::{AttachmentRow, ClaimRow, Lifecycle};

/// A run of volumes by name with their claims and attachments, as a listing reads them.
/// The volumes are kept as the store holds them, and decoded by `decode` where they are
/// shaped: the thread holding the read transaction only copies their columns.
#[derive(Clone, Debug)]
pub struct VolumeChunk {
    pub volumes: StoredRows,
    /// The store's reading of one of `volumes`.
    pub decode: fn(StoredRow<'_>) -> Result<VolumeFields<'_>, String>,
    /// The name of the last volume (`None`: the chunk is empty).
    pub last: Option<String>,
    pub claims: std::collections::HashMap<String, Vec<ClaimRow>>,
    pub attachments: std::collections::HashMap<String, Vec<AttachmentRow>>,
    /// The mount settings of the volumes that set any (`volume_mounts`).
    pub mounts: std::collections::HashMap<String, api::VolumeMounts>,
    /// The volumes an operator took out of service (`volume_availability`).
    pub availability: std::collections::HashMap<String, api::VolumeAvailability>,
    /// The per-job volumes among them (`job_volumes`).
    pub jobs: std::collections::HashMap<String, api::JobVolume>,
    /// The labels of the volumes that have any (`volume_labels`).
    pub labels: std::collections::HashMap<String, BTreeMap<String, String>>,
    /// The stagings kept after a release (`lingers`), by volume.
    pub lingers: std::collections::HashMap<String, Vec<crate::model::LingerRow>>,
}

/// A volume row's fields borrowed from where the store read them: what a listing shows of
/// a volume without making a string of every column. The collections are most often empty,
/// which allocates nothing.
#[derive(Clone, Debug, PartialEq)]
pub struct VolumeFields<'a> {
    pub name: &'a str,
    pub plugin: &'a str,
    pub external_id: &'a str,
    pub access_mode: AccessMode,
    pub attachment: api::Attachment,
    pub fs_type: &'a str,
    pub mount_flags: Vec<String>,
    pub context: BTreeMap<String, String>,
    pub parameters: BTreeMap<String, String>,
    /// The names of its secrets; their values are never listed.
    pub secret_keys: Vec<String>,
    pub capacity_bytes: Option<u64>,
    pub lifecycle: Lifecycle,
    pub error: Option<&'a str>,
    pub created_at: i64,
    pub updated_at: i64,
    pub modify_index: u64,
    pub expansion: Option<api::Expansion>,
    pub accessible_topology: Vec<Topology>,
    pub topology_request: Option<api::TopologyRequest>,
    pub mutable_parameters: BTreeMap<String, String>,
    pub modification: Option<api::Modification>,
}

/// One column's value within [`StoredRows`].
#[derive(Clone, Copy, Debug)]
enum Cell {
    Null,
    Int(i64),
    /// A byte range of the rows' text.
    Text(usize, usize),
    /// A type no row of ours stores (a real or a blob).
    Other,
}

/// Rows of one width as a store read them: every column's value as stored, the text of
/// all of them in one buffer. Reading rows this way costs a copy of their bytes and no
/// allocation per value; decoding them can then happen on another thread.
#[derive(Clone, Debug, Default)]
pub struct StoredRows {
    columns: usize,
    cells: Vec<Cell>,
    text: Vec<u8>,
}

impl StoredRows {
    pub fn new(columns: usize) -> Self {
        Self {
            columns,
            ..Self::default()
        }
    }

    pub fn push_null(&mut self) {
        self.cells.push(Cell::Null);
    }

    pub fn push_int(&mut self, v: i64) {
        self.cells.push(Cell::Int(v));
    }

    pub fn push_text(&mut self, bytes: &[u8]) {
        let start = self.text.len();
        self.text.extend_from_slice(bytes);
        self.cells.push(Cell::Text(start, self.text.len()));
    }

    pub fn push_other(&mut self) {
        self.cells.push(Cell::Other);
    }

    /// The rows pushed whole.
    pub fn len(&self) -> usize {
        self.cells.len().checked_div(self.columns).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn rows(&self) -> impl Iterator<Item = StoredRow<'_>> {
        self.cells
            .chunks_exact(self.columns.max(1))
            .map(|cells| StoredRow {
                cells,
                text: &self.text,
            })
    }
}

/// One of [`StoredRows`]; a column read as the wrong type is an error naming it.
#[derive(Clone, Copy, Debug)]
pub struct StoredRow<'a> {
    cells: &'a [Cell],
    text: &'a [u8],
}

impl<'a> StoredRow<'a> {
    fn cell(&self, i: usize) -> Result<Cell, String> {
        self.cells
            .get(i)
            .copied()
            .ok_or_else(|| format!("column {i} is past the row's {} columns", self.cells.len()))
    }

    pub fn text_or_null(&self, i: usize) -> Result<Option<&'a str>, String> {
        match self.cell(i)? {
            Cell::Null => Ok(None),
            Cell::Text(start, end) => std::str::from_utf8(&self.text[start..end])
                .map(Some)
                .map_err(|e| format!("column {i} is not UTF-8 text: {e}")),
            other => Err(format!("column {i} holds {other:?}, not text")),
        }
    }

    pub fn text(&self, i: usize) -> Result<&'a str, String> {
        self.text_or_null(i)?
            .ok_or_else(|| format!("column {i} is NULL, not text"))
    }

    pub fn int_or_null(&self, i: usize) -> Result<Option<i64>, String> {
        match self.cell(i)? {
            Cell::Null => Ok(None),
            Cell::Int(v) => Ok(Some(v)),
            other => Err(format!("column {i} holds {other:?}, not an integer")),
        }
    }

    pub fn int(&self, i: usize) -> Result<i64, String> {
        self.int_or_null(i)?
            .ok_or_else(|| format!("column {i} is NULL, not an integer"))
    }
}

#[cfg(test)]
mod tests {
    use super::StoredRows;

    #[test]
    fn stored_rows_give_each_column_back_and_name_a_column_of_the_wrong_type() {
        let mut rows = StoredRows::new(4);
        for (name, n) in [("v1", 1), ("v2", 2)] {
            rows.push_text(name.as_bytes());
            rows.push_int(n);
            rows.push_null();
            rows.push_text(b"\xff\xfe");
        }
        rows.push_text(b"a partial row is not a row");
        assert_eq!(rows.len(), 2);
        let read: Vec<_> = rows
            .rows()
            .map(|r| {
                (
                    r.text(0).unwrap(),
                    r.int(1).unwrap(),
                    r.int_or_null(2).unwrap(),
                )
            })
            .collect();
        assert_eq!(read, [("v1", 1, None), ("v2", 2, None)]);

        let r = rows.rows().next().unwrap();
        assert_eq!(r.text_or_null(2), Ok(None));
        assert_eq!(r.text(2).unwrap_err(), "column 2 is NULL, not text");
        assert!(
            r.text(3)
                .unwrap_err()
                .starts_with("column 3 is not UTF-8 text")
        );
        assert_eq!(r.text(1).unwrap_err(), "column 1 holds Int(1), not text");
        assert_eq!(
            r.int(0).unwrap_err(),
            "column 0 holds Text(0, 2), not an integer"
        );
        assert_eq!(
            r.int(4).unwrap_err(),
            "column 4 is past the row's 4 columns"
        );
        assert!(StoredRows::new(21).is_empty());
    }
}
