//! Where a single sequence's cache is built: from a layout (`--cache`, [`new_store`]),
//! from a `--kv` policy ([`new_policy_store`]), or from both ([`new_composed_store`]). The constructors live apart from the
//! interface (`mod.rs`) and the policy (`policy.rs`) so that each cache can name the
//! trait it implements and the policy it was built from without those naming every
//! cache.

use crate::cache::growable::{self, GrowableCache};
use crate::cache::h2o::H2oCache;
use crate::cache::hybrid::{self, HybridCache};
use crate::cache::paged::{PagedSeq, Retention};
use crate::cache::policy::{KvPolicy, RowCodes};
use crate::cache::preallocated::PreallocatedCache;
use crate::cache::quant::QuantCache;
use crate::cache::window::WindowCache;
use crate::cache::{CacheKind, KvElement, KvStore};
use crate::config::Config;
use crate::error::{Error, Result};

// ANCHOR: contiguous_full
/// Every position the model will read, reserved up front: all of them in every layer
/// ([`PreallocatedCache`]), unless the model has local layers (Gemma 3), whose rings
/// keep only their window ([`HybridCache`]; the two are bitwise twins).
pub fn contiguous_full(config: &Config, capacity: usize) -> Result<Box<dyn KvStore>> {
    if config.has_local_layers() {
        Ok(Box::new(HybridCache::new(
            config,
            capacity,
            hybrid::DEFAULT_PASS,
        )?))
    } else {
        Ok(Box::new(PreallocatedCache::new(config, capacity)?))
    }
}
// ANCHOR_END: contiguous_full

// ANCHOR: policy_store
/// A cache for one sequence of up to `capacity` positions, keeping what `policy` says.
pub fn new_policy_store(
    config: &Config,
    policy: KvPolicy,
    capacity: usize,
) -> Result<Box<dyn KvStore>> {
    match policy {
        KvPolicy::Full => contiguous_full(config, capacity),
        KvPolicy::Int8 | KvPolicy::Int4PerToken { .. } | KvPolicy::Int4Kivi { .. } => {
            Ok(Box::new(QuantCache::new(config, policy, capacity)?))
        }
        KvPolicy::Window { window, sinks } => {
            Ok(Box::new(WindowCache::new(config, window, sinks)?))
        }
        KvPolicy::Sliding {
            codes: RowCodes::F32,
            ..
        } => {
            let window = policy.window().expect("a sliding policy has a window");
            let pass = hybrid::DEFAULT_PASS;
            Ok(Box::new(HybridCache::sliding(
                config, capacity, pass, window,
            )?))
        }
        // Quantized rows under a window: every row kept, the mask hiding the unseen
        // ones (the plain twin; `--cache paged` hands their blocks back).
        KvPolicy::Sliding { .. } => Ok(Box::new(QuantCache::new(config, policy, capacity)?)),
        KvPolicy::H2o { budget, recent } => Ok(Box::new(H2oCache::new(config, budget, recent)?)),
    }
}
// ANCHOR_END: policy_store

/// A cache of layout `kind` for one sequence of up to `capacity` positions.
///
/// Preallocated reserves all of `capacity` now (a local layer: its window, [`contiguous_full`]); growable starts at
/// [`growable::INITIAL_CAPACITY`](crate::cache::growable::INITIAL_CAPACITY) and doubles; paged and prefix get a pool of exactly
/// `ceil(capacity / block_size)` blocks and take them one at a time.
pub fn new_store(
    config: &Config,
    kind: CacheKind,
    capacity: usize,
    block_size: usize,
) -> Result<Box<dyn KvStore>> {
    Ok(match kind {
        CacheKind::Preallocated => contiguous_full(config, capacity)?,
        CacheKind::Growable => Box::new(GrowableCache::new(config, growable::INITIAL_CAPACITY)?),
        CacheKind::Paged | CacheKind::Prefix => Box::new(PagedSeq::single(
            config,
            block_size,
            capacity.div_ceil(block_size.max(1)).max(1),
            kind == CacheKind::Prefix,
        )?),
    })
}

// ANCHOR: composed_store
/// A cache for one sequence of up to `capacity` positions: the layout `kind` holding
/// what `policy` keeps. A paged or prefix pool stores f32, int8 or int4-per-token blocks
/// (`element.rs`), or keeps a window of blocks, per pass (f32) or per query (f32, int8 or
/// int4-per-token: `--kv int8+sliding`, `paged/retention.rs`); the preallocated layout
/// takes every policy; what a layout cannot hold is refused with the reason.
pub fn new_composed_store(
    config: &Config,
    kind: CacheKind,
    policy: KvPolicy,
    capacity: usize,
    block_size: usize,
) -> Result<Box<dyn KvStore>> {
    match (kind, policy) {
        (_, KvPolicy::Full) => new_store(config, kind, capacity, block_size),
        (CacheKind::Preallocated, _) => new_policy_store(config, policy, capacity),
        (CacheKind::Paged | CacheKind::Prefix, _) => {
            // A window is a retention, not an element: its blocks hold f32 rows, and
            // the table drops the blocks the window slid past (`paged/retention.rs`).
            let element = match policy {
                KvPolicy::Window { .. } => KvElement::F32,
                _ => KvElement::for_pool(config, policy, kind.name())?,
            };
            Ok(Box::new(PagedSeq::single_keeping(
                config,
                element,
                Retention::of(policy)?,
                block_size,
                capacity.div_ceil(block_size.max(1)).max(1),
                kind == CacheKind::Prefix,
            )?))
        }
        (CacheKind::Growable, _) => Err(Error::InvalidArgument(format!(
            "--cache growable doubles one f32 buffer and --kv {} needs a cache of its own: use --cache preallocated (every --kv), or paged or prefix (int8, int4-per-token, window, sliding, int8+sliding, int4-per-token+sliding)",
            policy.name()
        ))),
    }
}
// ANCHOR_END: composed_store
