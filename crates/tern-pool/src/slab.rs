//! A typed slab with generation-checked ids, reporting its memory to a [`PoolCounter`].

use std::fmt;

use crate::registry::{MemoryRegistry, PoolCounter};

/// A handle to a [`Slab`] entry: the slot index and the slot's generation when the entry was
/// inserted. Once the entry is removed the slot's generation moves on, so a stale id (say, a
/// timer firing for a viewer that already left) finds nothing instead of the slot's next
/// occupant.
///
/// (The field is `generation`, not `gen`: `gen` is a reserved keyword in Rust 2024.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SlabId {
    /// Slot index.
    pub index: u32,
    /// Generation of the slot when the entry was inserted.
    pub generation: u32,
}

enum State<T> {
    Occupied(T),
    /// Free; `next` is the next free slot index, or `NONE`.
    Vacant {
        next: u32,
    },
    /// Its generation is exhausted: never reused, so no id can ever alias.
    Retired,
}

struct Slot<T> {
    generation: u32,
    state: State<T>,
}

const NONE: u32 = u32::MAX;

/// A slab of `T`: entries live in one `Vec` of slots, addressed by [`SlabId`]; freed slots are
/// reused last-freed first through an intrusive free list. Lookup is an index plus a generation
/// compare, never a scan.
///
/// Capacity is allocated up front. [`insert`](Self::insert) grows the slab when it is full;
/// [`try_insert`](Self::try_insert) never allocates and refuses instead, for classes with a hard
/// cap (concurrent DTLS handshakes).
///
/// The slab reports to a [`PoolCounter`]: allocated bytes are `capacity() * slot_size()`, used
/// bytes `len() * slot_size()`, where [`slot_size`](Self::slot_size) is `size_of::<T>()` plus
/// the slot's generation and occupancy tag (usually 8 bytes; counting it keeps the report true
/// to the heap). Memory that `T` owns itself (a `Vec` inside a session) is not seen; report it
/// through a separate counter if it matters.
pub struct Slab<T> {
    slots: Vec<Slot<T>>,
    free_head: u32,
    len: usize,
    counter: PoolCounter,
    /// Bytes this slab has reserved in `counter`.
    reserved: usize,
}

impl<T> Slab<T> {
    /// Bytes per slot, as reported.
    pub const fn slot_size() -> usize {
        size_of::<Slot<T>>()
    }

    /// A slab for `capacity` entries, reporting as `name` in the
    /// [global registry](MemoryRegistry::global).
    pub fn new(name: &'static str, capacity: usize) -> Self {
        Self::new_in(MemoryRegistry::global(), name, capacity)
    }

    /// A slab for `capacity` entries, reporting as `name` in `registry`.
    pub fn new_in(registry: &MemoryRegistry, name: &'static str, capacity: usize) -> Self {
        Self::with_counter(registry.counter(name, Self::slot_size()), capacity)
    }

    /// A slab for `capacity` entries, reporting to `counter` (which several slabs may share,
    /// e.g. one per worker thread).
    pub fn with_counter(counter: PoolCounter, capacity: usize) -> Self {
        let capacity = capacity.min(NONE as usize);
        let mut slab = Self {
            slots: Vec::with_capacity(capacity),
            free_head: NONE,
            len: 0,
            counter,
            reserved: 0,
        };
        slab.sync_reserved();
        slab
    }

    /// Bring the counter's reserved bytes in line with the slot vector's capacity.
    fn sync_reserved(&mut self) {
        let now = self.slots.capacity().saturating_mul(Self::slot_size());
        if now > self.reserved {
            self.counter.reserve(now - self.reserved);
        } else if now < self.reserved {
            self.counter.unreserve(self.reserved - now);
        }
        self.reserved = now;
    }

    /// Insert `value`, growing the slab if it is full.
    ///
    /// # Panics
    ///
    /// If the slab already has `u32::MAX` slots (like `Vec::push` overflowing its capacity).
    pub fn insert(&mut self, value: T) -> SlabId {
        if self.free_head == NONE && self.slots.len() == self.slots.capacity() {
            assert!(
                self.slots.len() < NONE as usize,
                "Slab index space exhausted"
            );
            // Double, as `Vec` would, but never past the u32 index space.
            let more = self.slots.len().clamp(1, NONE as usize - self.slots.len());
            self.slots.reserve_exact(more);
            self.sync_reserved();
        }
        match self.try_insert(value) {
            Ok(id) => id,
            // Unreachable: a free slot or spare capacity was ensured above.
            Err(_) => panic!("Slab::insert found no room after growing"),
        }
    }

    /// Insert `value` into a free slot or spare preallocated capacity; never allocates. Gives
    /// the value back if the slab is full.
    pub fn try_insert(&mut self, value: T) -> Result<SlabId, T> {
        let index = if self.free_head != NONE {
            let index = self.free_head;
            let slot = &mut self.slots[index as usize];
            self.free_head = match slot.state {
                State::Vacant { next } => next,
                // The free list only links vacant slots.
                State::Occupied(_) | State::Retired => NONE,
            };
            slot.state = State::Occupied(value);
            index
        } else if self.slots.len() < self.slots.capacity() && self.slots.len() < NONE as usize {
            let index = self.slots.len() as u32;
            self.slots.push(Slot {
                generation: 0,
                state: State::Occupied(value),
            });
            index
        } else {
            return Err(value);
        };
        self.len += 1;
        self.counter.add(1, Self::slot_size());
        Ok(SlabId {
            index,
            generation: self.slots[index as usize].generation,
        })
    }

    fn slot(&self, id: SlabId) -> Option<&Slot<T>> {
        self.slots
            .get(id.index as usize)
            .filter(|s| s.generation == id.generation)
    }

    /// The entry `id` refers to, if it is still there.
    pub fn get(&self, id: SlabId) -> Option<&T> {
        match &self.slot(id)?.state {
            State::Occupied(v) => Some(v),
            _ => None,
        }
    }

    /// The entry `id` refers to, mutably, if it is still there.
    pub fn get_mut(&mut self, id: SlabId) -> Option<&mut T> {
        let slot = self
            .slots
            .get_mut(id.index as usize)
            .filter(|s| s.generation == id.generation)?;
        match &mut slot.state {
            State::Occupied(v) => Some(v),
            _ => None,
        }
    }

    /// Whether `id` refers to a live entry.
    pub fn contains(&self, id: SlabId) -> bool {
        self.get(id).is_some()
    }

    /// Remove and return the entry `id` refers to; `None` (and no change) for a stale id.
    pub fn remove(&mut self, id: SlabId) -> Option<T> {
        let slot = self
            .slots
            .get_mut(id.index as usize)
            .filter(|s| s.generation == id.generation)?;
        if !matches!(slot.state, State::Occupied(_)) {
            return None;
        }
        let old = if slot.generation == u32::MAX {
            std::mem::replace(&mut slot.state, State::Retired)
        } else {
            slot.generation += 1;
            let next = self.free_head;
            self.free_head = id.index;
            std::mem::replace(&mut slot.state, State::Vacant { next })
        };
        self.len -= 1;
        self.counter.sub(1, Self::slot_size());
        match old {
            State::Occupied(v) => Some(v),
            // Checked above.
            State::Vacant { .. } | State::Retired => None,
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the slab holds no entries.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Slots allocated (occupied or not).
    pub fn capacity(&self) -> usize {
        self.slots.capacity()
    }

    /// The counter this slab reports to.
    pub fn counter(&self) -> &PoolCounter {
        &self.counter
    }

    /// Entries with their ids, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (SlabId, &T)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match &s.state {
                State::Occupied(v) => Some((
                    SlabId {
                        index: i as u32,
                        generation: s.generation,
                    },
                    v,
                )),
                _ => None,
            })
    }

    /// Entries with their ids, mutably, in slot order.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (SlabId, &mut T)> {
        self.slots
            .iter_mut()
            .enumerate()
            .filter_map(|(i, s)| match &mut s.state {
                State::Occupied(v) => Some((
                    SlabId {
                        index: i as u32,
                        generation: s.generation,
                    },
                    v,
                )),
                _ => None,
            })
    }
}

impl<T> Drop for Slab<T> {
    fn drop(&mut self) {
        self.counter
            .sub(self.len, self.len.saturating_mul(Self::slot_size()));
        self.counter.unreserve(self.reserved);
    }
}

impl<T> fmt::Debug for Slab<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Slab")
            .field("name", &self.counter.name())
            .field("len", &self.len)
            .field("capacity", &self.capacity())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_ids_are_rejected() {
        let reg = MemoryRegistry::new();
        let mut slab = Slab::new_in(&reg, "sessions", 4);
        let a = slab.insert("a");
        let b = slab.insert("b");
        assert_eq!(slab.remove(a), Some("a"));
        assert_eq!(slab.get(a), None);
        assert_eq!(slab.remove(a), None, "double remove");
        let c = slab.insert("c");
        assert_eq!(c.index, a.index, "freed slot reused");
        assert_ne!(c.generation, a.generation);
        assert_eq!(slab.get(a), None, "stale id must not see the new occupant");
        assert_eq!(slab.get_mut(a), None);
        assert!(!slab.contains(a));
        assert_eq!(slab.get(c), Some(&"c"));
        assert_eq!(slab.get(b), Some(&"b"));
        let bogus = SlabId {
            index: 99,
            generation: 0,
        };
        assert_eq!(slab.get(bogus), None);
        assert_eq!(slab.remove(bogus), None);
        assert_eq!(slab.len(), 2);
    }

    #[test]
    fn lifo_reuse_and_iteration() {
        let reg = MemoryRegistry::new();
        let mut slab = Slab::new_in(&reg, "s", 8);
        let ids: Vec<SlabId> = (0..5).map(|i| slab.insert(i)).collect();
        slab.remove(ids[1]);
        slab.remove(ids[3]);
        assert_eq!(slab.insert(30).index, ids[3].index, "last freed first");
        assert_eq!(slab.insert(10).index, ids[1].index);
        let mut seen: Vec<i32> = slab.iter().map(|(_, v)| *v).collect();
        seen.sort_unstable();
        assert_eq!(seen, [0, 2, 4, 10, 30]);
        for (id, v) in slab.iter_mut() {
            *v += 1;
            assert!(id.index < 5);
        }
        assert_eq!(slab.get(ids[0]), Some(&1));
        for (id, v) in slab.iter() {
            assert_eq!(slab.get(id), Some(v));
        }
    }

    #[test]
    fn try_insert_respects_capacity_and_insert_grows() {
        let reg = MemoryRegistry::new();
        let mut slab = Slab::new_in(&reg, "handshakes", 2);
        let cap = slab.capacity();
        for i in 0..cap {
            assert!(slab.try_insert(i).is_ok());
        }
        assert_eq!(slab.try_insert(99), Err(99));
        let id = slab.insert(100);
        assert!(slab.capacity() > cap);
        assert_eq!(slab.get(id), Some(&100));
        let r = slab.counter().report();
        assert_eq!(
            r.allocated_bytes,
            slab.capacity() * Slab::<usize>::slot_size()
        );
        assert_eq!(r.used_bytes, slab.len() * Slab::<usize>::slot_size());
    }

    #[test]
    fn reports_used_and_allocated() {
        let reg = MemoryRegistry::new();
        let mut slab: Slab<[u8; 100]> = Slab::new_in(&reg, "viewers", 10);
        let slot = Slab::<[u8; 100]>::slot_size();
        assert!(slot >= 100);
        let ids: Vec<SlabId> = (0..4).map(|_| slab.insert([0; 100])).collect();
        slab.remove(ids[0]);
        let r = &reg.reports()[0];
        assert_eq!(r.name, "viewers");
        assert_eq!(r.allocated_bytes, slab.capacity() * slot);
        assert_eq!(r.used_bytes, 3 * slot);
        assert_eq!((r.items_in_use, r.items_peak), (3, 4));
        assert_eq!(r.peak_bytes, 4 * slot);
        drop(slab);
        assert!(reg.reports().is_empty(), "the slab owned its counter");
    }

    #[test]
    fn shared_counter_sums_slabs_and_forgets_dropped_ones() {
        let reg = MemoryRegistry::new();
        let counter = reg.counter("viewer_sessions", Slab::<u64>::slot_size());
        let mut a: Slab<u64> = Slab::with_counter(counter.clone(), 4);
        let mut b: Slab<u64> = Slab::with_counter(counter.clone(), 4);
        a.insert(1);
        b.insert(2);
        b.insert(3);
        assert_eq!(counter.report().items_in_use, 3);
        drop(b);
        let r = counter.report();
        assert_eq!(r.items_in_use, 1);
        assert_eq!(r.allocated_bytes, a.capacity() * Slab::<u64>::slot_size());
    }

    #[test]
    fn exhausted_generation_retires_the_slot() {
        let reg = MemoryRegistry::new();
        let mut slab = Slab::new_in(&reg, "s", 2);
        let id = slab.insert(1u8);
        slab.slots[id.index as usize].generation = u32::MAX;
        let id = SlabId {
            generation: u32::MAX,
            ..id
        };
        assert_eq!(slab.remove(id), Some(1));
        let next = slab.insert(2);
        assert_ne!(next.index, id.index, "retired slot is never reused");
        assert_eq!(slab.get(id), None);
        assert_eq!(slab.len(), 1);
    }
}
