//! # Exercise 10 — appending to a preallocated KV cache (KV缓存)
//!
//! The seed article (§2.3): prefill writes every layer's K and V into the cache; each decode
//! step (解码) computes K and V for the one new token and *appends* them. The cache only
//! grows (只增不减) until the request ends.
//!
//! Engines allocate the cache once, at full capacity, before decoding starts (§3.3), the way
//! llama2.c's `malloc_run_state` does: one `Vec` of `capacity * n_kv_heads * head_dim`
//! floats for K and one for V, and a fill level `len`. Appending copies one row into place.
//! When the cache is full, append must say so with an error. It must not panic (a long chat
//! is not a bug), and it must not quietly grow the buffer: a `Vec::push` past capacity
//! reallocates and copies the whole cache, and the memory estimate of exercise 13 would no
//! longer hold. The caller decides what to do: stop, evict (StreamingLLM, H2O) or page
//! (PagedAttention).
//!
//! This is one layer's cache; a model needs one per layer (llama2.c keeps them all in one
//! `(layer, seq_len, dim)` buffer).

/// The cache has no room for another position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheFull {
    pub capacity: usize,
    /// How many positions the failed append would have needed.
    pub requested: usize,
}

/// One layer's KV cache, allocated once at its full capacity.
pub struct KvCache {
    /// `[capacity, n_kv_heads, head_dim]`; positions `0..len` are filled.
    pub k_cache: Vec<f32>,
    /// `[capacity, n_kv_heads, head_dim]`; positions `0..len` are filled.
    pub v_cache: Vec<f32>,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Positions the buffers hold; fixed at creation.
    pub capacity: usize,
    /// Positions written so far; the next append writes position `len`.
    pub len: usize,
}

impl KvCache {
    /// Given: allocates both buffers at full size, once.
    pub fn new(n_kv_heads: usize, head_dim: usize, capacity: usize) -> Self {
        let size = capacity * n_kv_heads * head_dim;
        KvCache {
            k_cache: vec![0.0; size],
            v_cache: vec![0.0; size],
            n_kv_heads,
            head_dim,
            capacity,
            len: 0,
        }
    }

    /// Floats per position: one `[n_kv_heads, head_dim]` row.
    pub fn row(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    /// Writes K and V of the next position. `k`, `v`: `[n_kv_heads, head_dim]`.
    pub fn append(&mut self, k: &[f32], v: &[f32]) -> Result<(), CacheFull> {
        let row = self.row();
        // A wrong-sized row is a bug in the caller, not a runtime condition: panic.
        assert_eq!(k.len(), row, "k must be [n_kv_heads, head_dim]");
        assert_eq!(v.len(), row, "v must be [n_kv_heads, head_dim]");
        // A full cache is a runtime condition (long conversations happen): report it.
        if self.len == self.capacity {
            return Err(CacheFull {
                capacity: self.capacity,
                requested: self.len + 1,
            });
        }
        // Copy into the preallocated row `len`; the buffers never change size.
        let start = self.len * row;
        self.k_cache[start..start + row].copy_from_slice(k);
        self.v_cache[start..start + row].copy_from_slice(v);
        self.len += 1;
        Ok(())
    }

    /// Forgets every position but keeps the memory, ready for the next request.
    pub fn reset(&mut self) {
        // Why not zero the buffers: every read stops at `len`, so the stale rows are
        // unreachable, and zeroing would cost O(capacity) for every new request.
        self.len = 0;
    }

    /// Given: the filled part of K, `[len, n_kv_heads, head_dim]`.
    pub fn keys(&self) -> &[f32] {
        &self.k_cache[..self.len * self.row()]
    }

    /// Given: the filled part of V, `[len, n_kv_heads, head_dim]`.
    pub fn values(&self) -> &[f32] {
        &self.v_cache[..self.len * self.row()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A recognisable row: position p, head h, dim d holds p*100 + h*10 + d (+0.5 for V).
    fn row(pos: usize, n_kv_heads: usize, head_dim: usize, offset: f32) -> Vec<f32> {
        (0..n_kv_heads * head_dim)
            .map(|i| (pos * 100 + (i / head_dim) * 10 + i % head_dim) as f32 + offset)
            .collect()
    }

    #[test]
    fn new_allocates_everything_up_front() {
        let cache = KvCache::new(3, 4, 5);
        assert_eq!(cache.k_cache.len(), 5 * 3 * 4);
        assert_eq!(cache.v_cache.len(), 5 * 3 * 4);
        assert_eq!(cache.len, 0);
        assert!(cache.keys().is_empty());
    }

    #[test]
    fn append_writes_the_next_position() {
        let mut cache = KvCache::new(2, 3, 4);
        for pos in 0..3 {
            cache
                .append(&row(pos, 2, 3, 0.0), &row(pos, 2, 3, 0.5))
                .unwrap();
            assert_eq!(cache.len, pos + 1);
        }
        let want_k: Vec<f32> = (0..3).flat_map(|p| row(p, 2, 3, 0.0)).collect();
        let want_v: Vec<f32> = (0..3).flat_map(|p| row(p, 2, 3, 0.5)).collect();
        assert_eq!(cache.keys(), &want_k[..]);
        assert_eq!(cache.values(), &want_v[..]);
        // Position 1, KV head 1 sits at (1 * n_kv_heads + 1) * head_dim in the flat buffer.
        assert_eq!(&cache.k_cache[9..12], &[110.0, 111.0, 112.0]);
    }

    #[test]
    fn a_full_cache_returns_an_error_and_changes_nothing() {
        let mut cache = KvCache::new(1, 2, 2);
        cache.append(&[1.0, 2.0], &[3.0, 4.0]).unwrap();
        cache.append(&[5.0, 6.0], &[7.0, 8.0]).unwrap();
        let ptr = cache.k_cache.as_ptr();
        let err = cache.append(&[9.0, 9.0], &[9.0, 9.0]).expect_err("full");
        assert_eq!((err.capacity, err.requested), (2, 3));
        // No silent growth: same length, same allocation, same contents.
        assert_eq!(cache.len, 2);
        assert_eq!(cache.k_cache.len(), 4);
        assert_eq!(cache.k_cache.as_ptr(), ptr);
        assert_eq!(cache.keys(), &[1.0, 2.0, 5.0, 6.0]);
        assert_eq!(cache.values(), &[3.0, 4.0, 7.0, 8.0]);
    }

    #[test]
    fn reset_starts_a_new_request_without_reallocating() {
        let mut cache = KvCache::new(1, 2, 3);
        cache.append(&[1.0, 1.0], &[1.0, 1.0]).unwrap();
        cache.append(&[2.0, 2.0], &[2.0, 2.0]).unwrap();
        let ptr = cache.k_cache.as_ptr();
        cache.reset();
        assert_eq!(cache.len, 0);
        assert!(
            cache.keys().is_empty(),
            "the previous request must not leak into the next"
        );
        // The next request fills from position 0 again, in the same memory.
        cache.append(&[7.0, 7.0], &[8.0, 8.0]).unwrap();
        assert_eq!(cache.keys(), &[7.0, 7.0]);
        assert_eq!(cache.values(), &[8.0, 8.0]);
        assert_eq!(cache.k_cache.as_ptr(), ptr);
        // ...and gets its full capacity back.
        cache.append(&[0.0, 0.0], &[0.0, 0.0]).unwrap();
        cache.append(&[0.0, 0.0], &[0.0, 0.0]).unwrap();
        assert!(cache.append(&[0.0, 0.0], &[0.0, 0.0]).is_err());
    }

    #[test]
    #[should_panic]
    fn a_wrong_sized_row_is_a_bug() {
        let mut cache = KvCache::new(2, 4, 8);
        // [4] instead of [n_kv_heads * head_dim = 8]
        let _ = cache.append(&[0.0; 4], &[0.0; 4]);
    }
}
