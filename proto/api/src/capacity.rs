//! Storage capacity: what a controller host asks its plugin (GetCapacity, where the
//! controller reports GET_CAPACITY) per topology segment and parameter set in use, what it
//! reports, and what `plugin show` lists. The CSI spec makes GetCapacity advisory: a
//! sample is what the plugin said at one moment, never a promise that a volume fits.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One GetCapacity a controller host makes: `segment` is its `accessible_topology` (empty:
/// none, the plugin's whole capacity), `parameters` the creation parameters.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct CapacityQuery {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub segment: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: BTreeMap<String, String>,
}

/// The GetCapacity calls a controller host makes for one plugin it hosts, given in its
/// desired state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapacityQueries {
    pub plugin: String,
    pub queries: Vec<CapacityQuery>,
}

/// One GetCapacity answer (spec.md, GetCapacity: `available_capacity` "The available
/// capacity, in bytes. This field is REQUIRED"; `maximum_volume_size` "The largest size
/// usable in CapacityRange.required_bytes with the same parameters. This field is
/// OPTIONAL", likewise `minimum_volume_size` for `limit_bytes`). An absent size is one the
/// plugin did not say, never a limit of 0.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapacitySample {
    #[serde(flatten)]
    pub query: CapacityQuery,
    pub available_bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maximum_volume_size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimum_volume_size: Option<u64>,
}

/// A plugin's capacity as `plugin show` lists it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginCapacity {
    /// Whether a controller of the plugin reports GET_CAPACITY. Without it there are no
    /// samples, and `volume create` proceeds without a capacity check.
    pub reported: bool,
    /// The latest answer per segment and parameter set this server heard, each with its
    /// age: samples live in the memory of the server the controller host reports to.
    #[serde(default)]
    pub samples: Vec<CapacityShown>,
}

/// One sample with its age.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapacityShown {
    #[serde(flatten)]
    pub sample: CapacitySample,
    /// How long ago the server heard it, in ms.
    pub age_ms: u64,
    /// Whether it is recent enough for `volume create` to act on.
    pub fresh: bool,
}
