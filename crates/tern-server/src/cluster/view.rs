//! What the cluster looks like from here: the live nodes and the origin map, as read from
//! Redis once a second, and the routing choice made from it. Pure data, tested alone.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

/// A node's record in the registry (`tern:node:{name}`, JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// Unique name (`cluster.node`).
    pub name: String,
    /// How viewers and nodes reach its HTTP (`cluster.url`).
    pub url: String,
    /// Its media address (the ICE candidate it announces).
    pub media: String,
    /// WebRTC viewers held (an edge's upstream session counts as one at its origin).
    pub viewers: u64,
    /// Publishers connected or connecting (edge upstreams included).
    pub publishers: u64,
    /// Bits per second sent over the last second.
    pub egress_bps: u64,
    /// Share of one core its process used over the last second (1.0 = one core).
    pub cpu: f64,
    /// tern version.
    pub version: String,
    /// Draining for an upgrade (`POST /v1/drain`): routing sends it no viewer. Absent in
    /// the records of older nodes (false).
    #[serde(default)]
    pub draining: bool,
}

/// The registry and origin map at one moment. Immutable once built; replaced whole when a
/// refresh finds something changed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct View {
    /// Live nodes, by name.
    pub nodes: Vec<NodeRecord>,
    /// `app/stream` → the node that has its publisher.
    pub origins: BTreeMap<String, String>,
}

impl View {
    /// The node named `name`.
    pub fn node(&self, name: &str) -> Option<&NodeRecord> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// The least-loaded node that is not draining: fewest viewers (the registry's count plus
    /// `sent`, the viewers this node sent there since the registry was read), then least
    /// egress, then name.
    pub fn least_loaded(&self, sent: &HashMap<String, u64>) -> Option<&NodeRecord> {
        self.least_loaded_except(sent, &[])
    }

    /// [`View::least_loaded`] leaving out the nodes named in `except`.
    pub fn least_loaded_except(
        &self,
        sent: &HashMap<String, u64>,
        except: &[&str],
    ) -> Option<&NodeRecord> {
        let candidates = self
            .nodes
            .iter()
            .filter(|n| !n.draining && !except.contains(&n.name.as_str()));
        candidates.min_by(|a, b| {
            let load = |n: &NodeRecord| n.viewers + sent.get(&n.name).copied().unwrap_or(0);
            load(a)
                .cmp(&load(b))
                .then(a.egress_bps.cmp(&b.egress_bps))
                .then(a.name.cmp(&b.name))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, viewers: u64, egress: u64) -> NodeRecord {
        NodeRecord {
            name: name.into(),
            url: format!("http://{name}"),
            media: String::new(),
            viewers,
            publishers: 0,
            egress_bps: egress,
            cpu: 0.0,
            version: String::new(),
            draining: false,
        }
    }

    #[test]
    fn least_loaded_by_viewers_then_egress_then_name() {
        let v = View {
            nodes: vec![node("a", 5, 0), node("b", 3, 900), node("c", 3, 100)],
            origins: BTreeMap::new(),
        };
        let none = HashMap::new();
        assert_eq!(v.least_loaded(&none).map(|n| n.name.as_str()), Some("c"));
        let v2 = View {
            nodes: vec![node("b", 0, 0), node("a", 0, 0)],
            origins: BTreeMap::new(),
        };
        assert_eq!(v2.least_loaded(&none).map(|n| n.name.as_str()), Some("a"));
        assert!(View::default().least_loaded(&none).is_none());
    }

    #[test]
    fn a_draining_node_is_never_chosen() {
        let mut busy = node("busy", 50, 0);
        let mut idle = node("idle", 0, 0);
        idle.draining = true;
        let v = View {
            nodes: vec![busy.clone(), idle],
            origins: BTreeMap::new(),
        };
        let none = HashMap::new();
        assert_eq!(v.least_loaded(&none).map(|n| n.name.as_str()), Some("busy"));
        busy.draining = true;
        let all = View {
            nodes: vec![busy],
            origins: BTreeMap::new(),
        };
        assert!(all.least_loaded(&none).is_none(), "every node drains");
        let v = View {
            nodes: vec![node("a", 0, 0), node("b", 9, 0)],
            origins: BTreeMap::new(),
        };
        assert_eq!(
            v.least_loaded_except(&none, &["a"])
                .map(|n| n.name.as_str()),
            Some("b")
        );
        // An older node's record (no `draining`) reads as not draining.
        let old: NodeRecord = serde_json::from_str(
            r#"{"name":"o","url":"http://o","media":"","viewers":0,"publishers":0,"egress_bps":0,"cpu":0.0,"version":"0.1.0"}"#,
        )
        .expect("an older record parses");
        assert!(!old.draining);
    }

    #[test]
    fn viewers_sent_since_the_read_spread_a_burst() {
        let v = View {
            nodes: vec![node("a", 0, 0), node("b", 0, 0), node("c", 0, 0)],
            origins: BTreeMap::new(),
        };
        let mut sent: HashMap<String, u64> = HashMap::new();
        let mut picks = Vec::new();
        for _ in 0..30 {
            let n = v.least_loaded(&sent).expect("a node").name.clone();
            *sent.entry(n.clone()).or_default() += 1;
            picks.push(n);
        }
        for name in ["a", "b", "c"] {
            assert_eq!(picks.iter().filter(|p| *p == name).count(), 10, "{picks:?}");
        }
    }
}
