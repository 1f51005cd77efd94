//! The paged allocator's invariants, checked by the property tests (`tests/caches.rs`)
//! after every operation of random interleavings. Book: paged-attention.md.

use super::{BlockId, PagedCache, SeqId, Sequence, HOLE};
use std::collections::{HashMap, HashSet};

impl PagedCache {
    // ANCHOR: invariants
    /// The allocator's invariants, checked by the property tests after every operation:
    /// 1. a block's reference count is the number of block tables that hold it;
    /// 2. a block nobody holds is on the free list or parked, never both;
    /// 3. free + used + cached = pool size;
    /// 4. every name points at a block that carries it, and parked blocks are named;
    /// 5. between passes, each of a sequence's tables (one per layer group) holds exactly
    ///    `ceil(len / block_size)` blocks (waste < one block) and its named blocks hold
    ///    its own tokens;
    /// 6. a hole stands only where a window dropped every position of the block (a
    ///    per-query window: where no later query looks), and a per-pass window's
    ///    sequence holds no more blocks than `Retention::max_blocks`.
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        let n = self.pool.n_blocks();
        let mut holders = vec![0u32; n];
        for table in self.seqs.values().flat_map(|s| &s.tables) {
            for &b in table.blocks.iter().filter(|&&b| b != HOLE) {
                holders[b] += 1;
            }
        }
        let free: HashSet<BlockId> = self.pool.free_list().iter().copied().collect();
        if free.len() != self.pool.free_list().len() {
            return Err("a block is on the free list twice".into());
        }
        let named = |b| self.prefix.as_ref().is_some_and(|p| p.is_named(b));
        let parked = |b| self.prefix.as_ref().is_some_and(|p| p.is_parked(b));
        for (b, &held) in holders.iter().enumerate() {
            let rc = self.pool.ref_count(b);
            if held != rc {
                return Err(format!(
                    "block {b}: ref count {rc} but {held} tables hold it"
                ));
            }
            let places = free.contains(&b) as u32 + parked(b) as u32 + (rc > 0) as u32;
            if places != 1 {
                return Err(format!(
                    "block {b}: ref count {rc}, free {}, parked {}",
                    free.contains(&b),
                    parked(b)
                ));
            }
            if (free.contains(&b) && named(b)) || (parked(b) && !named(b)) {
                return Err(format!("block {b}: free and named, or parked and unnamed"));
            }
        }
        let s = self.stats();
        if s.free + s.used + s.cached != n {
            return Err(format!(
                "free {} + used {} + cached {} != {n} blocks",
                s.free, s.used, s.cached
            ));
        }
        if let Some(p) = &self.prefix {
            let mut seen = HashMap::new();
            for (hash, b) in p.names() {
                if p.key(b).map(|k| k.hash) != Some(hash) || seen.insert(b, hash).is_some() {
                    return Err(format!(
                        "name {hash:x} points at block {b}, which is not it"
                    ));
                }
            }
        }
        for (id, seq) in &self.seqs {
            if seq.tables.len() != self.groups.len() {
                return Err(format!(
                    "{id:?}: {} block tables for {} layer groups",
                    seq.tables.len(),
                    self.groups.len()
                ));
            }
            if seq.tokens.len() != seq.len {
                return Err(format!(
                    "{id:?}: {} token ids for {} positions",
                    seq.tokens.len(),
                    seq.len
                ));
            }
            for (g, table) in seq.tables.iter().enumerate() {
                self.check_table(*id, g, seq, &table.blocks)?;
            }
        }
        Ok(())
    }
    // ANCHOR_END: invariants

    /// Invariants 5 and 6 on layer group `g`'s table of sequence `id`.
    fn check_table(
        &self,
        id: SeqId,
        g: usize,
        seq: &Sequence,
        blocks: &[BlockId],
    ) -> std::result::Result<(), String> {
        let bs = self.pool.block_size();
        if seq.pending.is_empty() && blocks.len() != seq.len.div_ceil(bs) {
            return Err(format!(
                "{id:?}: {} positions in {} blocks of group {g}'s table",
                seq.len,
                blocks.len()
            ));
        }
        // Positions a hole may cover: those a per-pass window dropped, or those below
        // where a per-query window's next query looks back to, sinks aside.
        let retention = self.groups.retention(g);
        let dropped = match retention.mask() {
            Some(w) => w.sinks..w.forgotten_below(seq.len).max(w.sinks),
            None => {
                let sinks = self.evicted(id).sinks;
                sinks..sinks + seq.evicted
            }
        };
        let real = blocks.iter().filter(|&&b| b != HOLE).count();
        if let Some(most) = retention.max_blocks(bs) {
            if real > most {
                return Err(format!(
                    "{id:?}: a window's sequence holds {real} blocks, more than {most}"
                ));
            }
        }
        for (i, &b) in blocks.iter().enumerate() {
            if b == HOLE {
                let held = i * bs..((i + 1) * bs).min(seq.len);
                if held.start < dropped.start || held.end > dropped.end {
                    return Err(format!(
                        "{id:?}: block {i} of group {g}'s table is a hole but positions {held:?} are not all dropped ({dropped:?})"
                    ));
                }
                continue;
            }
            let Some(key) = self.prefix.as_ref().and_then(|p| p.key(b)) else {
                continue;
            };
            let mine = &seq.tokens[(i * bs).min(seq.len)..((i + 1) * bs).min(seq.len)];
            if key.tokens[..mine.len()] != *mine {
                return Err(format!("{id:?}: block {b} is named for other tokens"));
            }
        }
        Ok(())
    }
}
