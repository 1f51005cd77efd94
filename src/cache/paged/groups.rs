//! Layer groups: which layers share a block table (book: sliding-window-model.md, "A
//! block table per layer group").
//!
//! A model whose layers all keep every position needs one block table per sequence:
//! a block holds `block_size` positions of every layer. Gemma 3 does not fit that
//! shape. Its local layers never read a position more than `window - 1` behind the
//! query, its global layers read them all; one table per sequence would keep every
//! local row for as long as the global layers need theirs, which is forever.
//!
//! vLLM's hybrid KV cache manager answers with *layer groups*: layers of one kind are
//! cut into groups of the same size, and each group gets its own block table, so the
//! local groups' tables can give blocks back while the global group's grows. Every
//! group has the same number of layers, so every block has the same bytes and one
//! pool serves them all: a block a local group gave back can hold the global group's
//! next positions.
//!
//! ```text
//! Gemma 3 270M: 18 layers, global 5, 11, 17; the rest local (window 512)
//! group size gcd(3, 15) = 3
//! group 0 (global): layers  5, 11, 17    Retention::Full
//! group 1 (local):  layers  0,  1,  2    Retention::Sliding { window: 512, sinks: 0 }
//! ...
//! group 5 (local):  layers 14, 15, 16
//! a block: 16 positions × 3 layers; a sequence: 6 block tables
//! ```
//!
//! A model without local layers has one group of every layer (`group_size =
//! n_layers`): one table per sequence, the blocks of PagedAttention, unchanged.

use super::block_pool::layers_per_block;
use super::retention::Retention;
use crate::config::Config;
use crate::error::{Error, Result};
use std::collections::BTreeMap;

// ANCHOR: layer_groups
/// Which layers share a block table, and what each table keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerGroups {
    /// Layers in every group: the layers a block holds.
    pub group_size: usize,
    /// In group order; a sequence has one block table per group.
    pub groups: Vec<LayerGroup>,
    /// Layer `l` is layer `place[l].1` of group `place[l].0`'s blocks.
    place: Vec<(usize, usize)>,
}

/// Layers of one kind whose rows share a block table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerGroup {
    /// The model's layer indices, ascending: slot `i` of a block holds `layers[i]`.
    pub layers: Vec<usize>,
    /// What this group's tables keep: every position (a global layer), or the window
    /// the model was trained with (a local layer: a window per query, no sinks).
    pub retention: Retention,
}
// ANCHOR_END: layer_groups

impl LayerGroups {
    /// One group of all `n_layers` layers, keeping what `retention` says.
    pub fn one(n_layers: usize, retention: Retention) -> LayerGroups {
        LayerGroups {
            group_size: n_layers,
            groups: vec![LayerGroup {
                layers: (0..n_layers).collect(),
                retention,
            }],
            place: (0..n_layers).map(|l| (0, l)).collect(),
        }
    }

    // ANCHOR: of_config
    /// The groups of `config`'s model: one per `group_size` layers of one kind (global,
    /// or local with a given window), where `group_size` is the greatest common divisor
    /// of the kinds' layer counts ([`layers_per_block`]), so every group is full and
    /// every block the same size. Global groups come first.
    pub fn of(config: &Config) -> LayerGroups {
        let n_layers = config.num_hidden_layers;
        // `None` (global) sorts before every window.
        let mut kinds: BTreeMap<Option<usize>, Vec<usize>> = BTreeMap::new();
        for l in 0..n_layers {
            kinds.entry(config.layer_window(l)).or_default().push(l);
        }
        if kinds.len() <= 1 && kinds.keys().all(Option::is_none) {
            return LayerGroups::one(n_layers, Retention::Full);
        }
        let group_size = layers_per_block(config);
        let mut groups = Vec::new();
        for (window, layers) in &kinds {
            let retention = match *window {
                Some(window) => Retention::Sliding { window, sinks: 0 },
                None => Retention::Full,
            };
            for chunk in layers.chunks(group_size) {
                groups.push(LayerGroup {
                    layers: chunk.to_vec(),
                    retention,
                });
            }
        }
        let mut place = vec![(0, 0); n_layers];
        for (g, group) in groups.iter().enumerate() {
            for (slot, &l) in group.layers.iter().enumerate() {
                place[l] = (g, slot);
            }
        }
        LayerGroups {
            group_size,
            groups,
            place,
        }
    }
    // ANCHOR_END: of_config

    /// Whether the groups keep different things (a model with local layers).
    pub fn is_hybrid(&self) -> bool {
        self.groups.len() > 1 || self.groups[0].retention != Retention::Full
    }

    /// `(group, slot)` of layer `layer`: its table, and which of the block's layers it is.
    pub fn place(&self, layer: usize) -> (usize, usize) {
        self.place[layer]
    }

    /// Layers of the model.
    pub fn n_layers(&self) -> usize {
        self.place.len()
    }

    /// Block tables per sequence.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// What group `g`'s tables keep.
    pub fn retention(&self, g: usize) -> Retention {
        self.groups[g].retention
    }

    /// This pool's groups keeping what `retention` says: a model without local layers
    /// takes any retention in its one group; one with local layers keeps its own
    /// windows, and a retention laid on top of them is refused.
    pub fn with_retention(mut self, retention: Retention) -> Result<LayerGroups> {
        if !self.is_hybrid() {
            self.groups[0].retention = retention;
            return Ok(self);
        }
        if retention != Retention::Full {
            return Err(Error::InvalidArgument(format!(
                "this model's local layers keep their own trained window in their block tables, and {retention:?} would lay another on its global layers too: use --kv full (or an element such as --kv int8)"
            )));
        }
        Ok(self)
    }

    /// The most blocks one sequence of `positions` positions holds at once, in all its
    /// tables, when no pass brings more than `pass` tokens.
    pub fn peak_blocks(&self, positions: usize, block_size: usize, pass: usize) -> usize {
        self.groups
            .iter()
            .map(|g| g.retention.peak_blocks(positions, block_size, pass))
            .fold(0, usize::saturating_add)
    }

    /// Layer-positions the next query of a sequence of `len` positions reads, over every
    /// layer: `len` in a global layer, at most the window in a local one.
    pub fn rows_read(&self, len: usize) -> usize {
        self.groups
            .iter()
            .map(|g| {
                let rows = g.retention.mask().map_or(len, |w| len.min(w.size));
                rows * g.layers.len()
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemma_3_270m_is_one_global_group_and_five_local_ones_of_three_layers() {
        let groups = LayerGroups::of(&Config::gemma3_270m());
        assert_eq!(groups.group_size, 3);
        assert_eq!(groups.len(), 6);
        assert_eq!(groups.groups[0].layers, vec![5, 11, 17]);
        assert_eq!(groups.groups[0].retention, Retention::Full);
        assert_eq!(groups.groups[1].layers, vec![0, 1, 2]);
        assert_eq!(groups.groups[2].layers, vec![3, 4, 6]);
        let sliding = Retention::Sliding {
            window: 512,
            sinks: 0,
        };
        assert!(groups.groups[1..].iter().all(|g| g.retention == sliding));
        assert_eq!(groups.place(6), (2, 2));
        assert_eq!(groups.place(17), (0, 2));
        // (3 × 32,768 + 15 × 512) layer-positions at 32k.
        assert_eq!(groups.rows_read(32_768), 3 * 32_768 + 15 * 512);
    }
}
