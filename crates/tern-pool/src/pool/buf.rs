//! [`Buf`] and [`SharedBuf`]: a pooled buffer while it is written, and once frozen and
//! shared by every viewer of a stream.

use std::fmt;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use super::inner::*;

/// An owned, mutable buffer from a [`BufferPool`]; returns to it when dropped, on any thread.
///
/// Dereferences to its current length (`..len()`); [`Buf::as_mut_full`] exposes the whole
/// capacity, e.g. for `recv` before [`Buf::set_len`].
///
/// [`BufferPool`]: super::BufferPool
pub struct Buf {
    /// The memory and the pool reference (for a pooled buffer, the one its free entry
    /// carried), as they sit in a free list: `Some` until dropped, then moved out whole.
    /// `ManuallyDrop` only spares the drop glue a check of the `None` that `drop` always
    /// leaves (it takes the entry on every path, so nothing is ever leaked).
    pub(super) entry: ManuallyDrop<Option<Entry>>,
    pub(super) len: usize,
}

impl Buf {
    /// Current length.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the length is zero.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Capacity: `upper` for pooled buffers, the requested length for fallback buffers.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.full().len()
    }

    /// The whole capacity (empty only while dropping).
    #[inline]
    fn full(&self) -> &[u8] {
        match &*self.entry {
            Some(e) => e.storage.as_slice(),
            None => &[],
        }
    }

    /// Set the length (bytes between the old and new length keep whatever they held).
    ///
    /// # Panics
    ///
    /// If `len > capacity()`.
    #[inline]
    pub fn set_len(&mut self, len: usize) {
        assert!(
            len <= self.capacity(),
            "Buf::set_len({len}) beyond capacity {}",
            self.capacity()
        );
        self.len = len;
    }

    /// The whole capacity, regardless of the current length.
    #[inline]
    pub fn as_mut_full(&mut self) -> &mut [u8] {
        // A `Buf`'s descriptor is never shared (only `freeze` shares it, consuming the
        // `Buf`), so `get_mut` always succeeds; `None` only while dropping.
        match self.entry.as_mut().and_then(Arc::get_mut) {
            Some(e) => e.storage.as_mut_slice(),
            None => &mut [],
        }
    }

    /// Whether this buffer returns to the pool when dropped (as opposed to a fallback for a
    /// length outside `[lower, upper]`).
    #[inline]
    pub fn is_pooled(&self) -> bool {
        self.entry.as_ref().is_some_and(|e| e.pooled)
    }

    pub(super) fn pool_name(&self) -> &'static str {
        self.entry.as_ref().map_or("", |e| e.pool.cfg.name)
    }

    /// Make the buffer immutable and shareable; it returns to the pool when the last clone of
    /// the [`SharedBuf`] drops. Allocates nothing: the buffer's descriptor, made with the
    /// buffer, carries the shared count.
    pub fn freeze(mut self) -> SharedBuf {
        let mut head = self.entry.take();
        if let Some(h) = head.as_mut().and_then(Arc::get_mut) {
            h.shared = true;
        }
        SharedBuf {
            head,
            len: self.len,
        }
    }
}

impl Drop for Buf {
    #[inline]
    fn drop(&mut self) {
        if self.is_pooled() {
            Inner::put(&mut self.entry);
        } else {
            self.drop_fallback();
        }
    }
}

impl Buf {
    /// A fallback buffer (or none, after `freeze`): its descriptor's drop does the
    /// accounting.
    #[cold]
    fn drop_fallback(&mut self) {
        drop(self.entry.take());
    }
}

impl Deref for Buf {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        &self.full()[..self.len]
    }
}

impl DerefMut for Buf {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        let len = self.len;
        &mut self.as_mut_full()[..len]
    }
}

impl AsRef<[u8]> for Buf {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl AsMut<[u8]> for Buf {
    fn as_mut(&mut self) -> &mut [u8] {
        self
    }
}

impl fmt::Debug for Buf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buf")
            .field("pool", &self.pool_name())
            .field("len", &self.len)
            .field("capacity", &self.capacity())
            .finish()
    }
}

/// An immutable, reference-counted pool buffer, shared by every viewer a packet fans out to.
/// The buffer returns to its pool when the last clone drops. Cloning and dropping touch one
/// atomic count; nothing is allocated or freed while the buffer circulates.
#[derive(Clone)]
pub struct SharedBuf {
    /// `Some` until dropped.
    head: Option<Entry>,
    len: usize,
}

impl SharedBuf {
    /// Number of live clones (for tests and diagnostics).
    pub fn ref_count(this: &Self) -> usize {
        this.head.as_ref().map_or(0, Arc::strong_count)
    }
}

impl Drop for SharedBuf {
    #[inline]
    fn drop(&mut self) {
        let Some(mut head) = self.head.take() else {
            return;
        };
        // The last clone: the descriptor goes back to the pool as it is. Two last clones
        // dropped at once both see the other and just let go; `Drop for Head` then returns
        // the buffer.
        if let Some(h) = Arc::get_mut(&mut head) {
            h.shared = false;
            if h.pooled {
                Inner::put(&mut Some(head));
            }
        }
    }
}

impl Deref for SharedBuf {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        match &self.head {
            Some(h) => &h.storage.as_slice()[..self.len],
            None => &[],
        }
    }
}

impl AsRef<[u8]> for SharedBuf {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl fmt::Debug for SharedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedBuf")
            .field("pool", &self.head.as_ref().map_or("", |h| h.pool.cfg.name))
            .field("len", &self.len)
            .field("refs", &SharedBuf::ref_count(self))
            .finish()
    }
}
