//! Giving back the capacity a wave of departures left: a table sized for 10,000 sessions
//! keeps that memory after they leave unless it is shrunk.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};

/// Shrinks a map that is mostly empty: to nothing when empty, else to twice its length
/// when under a quarter full (so a table that breathes around a size is not reallocated at
/// every removal).
pub fn shrink_map<K: Hash + Eq, V, S: BuildHasher>(m: &mut HashMap<K, V, S>) {
    if m.is_empty() {
        m.shrink_to_fit();
    } else if m.capacity() > 4 * m.len() {
        m.shrink_to(2 * m.len());
    }
}

/// Shrinks a vector that is mostly empty, as [`shrink_map`] does a map.
pub fn shrink_vec<T>(v: &mut Vec<T>) {
    if v.is_empty() {
        v.shrink_to_fit();
    } else if v.capacity() > 4 * v.len() {
        v.shrink_to(2 * v.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mostly_empty_tables_give_capacity_back() {
        let mut m: HashMap<u32, u32> = (0..1000).map(|i| (i, i)).collect();
        m.retain(|k, _| *k < 10);
        shrink_map(&mut m);
        assert!(m.capacity() < 100, "{}", m.capacity());
        m.clear();
        shrink_map(&mut m);
        assert_eq!(m.capacity(), 0);
        let mut v: Vec<u32> = (0..1000).collect();
        v.truncate(100);
        let before = v.capacity();
        shrink_vec(&mut v);
        assert!(v.capacity() >= 100 && v.capacity() < before);
        v.truncate(60);
        let kept = v.capacity();
        shrink_vec(&mut v);
        assert_eq!(v.capacity(), kept, "over a quarter full: kept");
    }
}
