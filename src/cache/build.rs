//! Where a single sequence's cache is built: from a layout (`--cache`, [`new_store`]) or
//! from a `--kv` policy ([`new_policy_store`]). The constructors live apart from the
//! interface (`mod.rs`) and the policy (`policy.rs`) so that each cache can name the
//! trait it implements and the policy it was built from without those naming every
//! cache.

use crate::cache::growable::{self, GrowableCache};
use crate::cache::h2o::H2oCache;
use crate::cache::paged::PagedSeq;
use crate::cache::policy::KvPolicy;
use crate::cache::preallocated::PreallocatedCache;
use crate::cache::quant::QuantCache;
use crate::cache::window::WindowCache;
use crate::cache::{CacheKind, KvStore};
use crate::config::Config;
use crate::error::Result;

// ANCHOR: policy_store
/// A cache for one sequence of up to `capacity` positions, keeping what `policy` says.
pub fn new_policy_store(
    config: &Config,
    policy: KvPolicy,
    capacity: usize,
) -> Result<Box<dyn KvStore>> {
    match policy {
        KvPolicy::Full => Ok(Box::new(PreallocatedCache::new(config, capacity)?)),
        KvPolicy::Int8 | KvPolicy::Int4PerToken { .. } | KvPolicy::Int4Kivi { .. } => {
            Ok(Box::new(QuantCache::new(config, policy, capacity)?))
        }
        KvPolicy::Window { window, sinks } => {
            Ok(Box::new(WindowCache::new(config, window, sinks)?))
        }
        KvPolicy::H2o { budget, recent } => Ok(Box::new(H2oCache::new(config, budget, recent)?)),
    }
}
// ANCHOR_END: policy_store

/// A cache of layout `kind` for one sequence of up to `capacity` positions.
///
/// Preallocated reserves all of `capacity` now; growable starts at
/// [`growable::INITIAL_CAPACITY`](crate::cache::growable::INITIAL_CAPACITY) and doubles; paged and prefix get a pool of exactly
/// `ceil(capacity / block_size)` blocks and take them one at a time.
pub fn new_store(
    config: &Config,
    kind: CacheKind,
    capacity: usize,
    block_size: usize,
) -> Result<Box<dyn KvStore>> {
    Ok(match kind {
        CacheKind::Preallocated => Box::new(PreallocatedCache::new(config, capacity)?),
        CacheKind::Growable => Box::new(GrowableCache::new(config, growable::INITIAL_CAPACITY)?),
        CacheKind::Paged | CacheKind::Prefix => Box::new(PagedSeq::single(
            config,
            block_size,
            capacity.div_ceil(block_size.max(1)).max(1),
            kind == CacheKind::Prefix,
        )?),
    })
}
