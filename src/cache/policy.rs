//! What the cache keeps, and how precisely: the `--kv` policies of part "Shrinking the
//! cache" (book: kv-quantization.md, eviction.md).
//!
//! A *layout* (`--cache`: preallocated, growable, paged, prefix) says **where** K and V
//! live; a *policy* says **what** is kept of them:
//!
//! | `--kv` | policy | keeps |
//! |---|---|---|
//! | `full` | [`KvPolicy::Full`] | every position, f32 |
//! | `int8` | [`KvPolicy::Int8`] | every position, int8 with one scale per token per head |
//! | `int4` | [`KvPolicy::Int4Kivi`] | every position, int4: keys per channel, values per token (KIVI) |
//! | `int4-per-token` | [`KvPolicy::Int4PerToken`] | every position, int4: keys *and* values per token |
//! | `window` | [`KvPolicy::Window`] | `window` positions: the first `sinks` and the latest |
//! | `sliding` | [`KvPolicy::Sliding`] | per query, `window` positions: the first `sinks` and the latest up to it |
//! | `int8+sliding`, `int4-per-token+sliding` | [`KvPolicy::Sliding`] with [`RowCodes`] | the same window, each row in int8 or int4 |
//! | `h2o` | [`KvPolicy::H2o`] | `budget` positions: the heaviest hitters and the `recent` last |
//!
//! The quantized policies change *how precisely* attention sees each position, the
//! eviction policies *which* positions it sees; every one of them is measured the same
//! way by `kvlab eval` (`src/lab/eval.rs`).

use crate::cache::h2o::check_budget;
use crate::cache::window::check_window;
use crate::error::{Error, Result};
use crate::mask::Window;
use serde::Serialize;

/// Channels (per-token scales) or tokens (per-channel scales) sharing one int4 scale when
/// none is given: KIVI's G = 32 (Liu et al. 2024, §4).
pub const DEFAULT_GROUP: usize = 32;

// ANCHOR: kv_policy
/// What the cache keeps of each position's K and V, and in what precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "policy", rename_all = "kebab-case")]
pub enum KvPolicy {
    /// Every position in f32: the reference.
    Full,
    /// Every position in int8, symmetric, one f32 scale per token per KV head.
    Int8,
    /// Every position in int4 (zero point + scale), keys and values both per token, in
    /// groups of `group` channels: the naive choice, measured against KIVI's.
    Int4PerToken { group: usize },
    /// KIVI (Liu et al. 2024): keys per *channel* over groups of `group` tokens (the
    /// last, unfilled group kept in f32), values per token in groups of `group` channels.
    Int4Kivi { group: usize },
    /// A sliding window of `window` positions: the first `sinks` (attention sinks, Xiao
    /// et al. 2024) and the latest `window - sinks` (`src/cache/window.rs`).
    Window { window: usize, sinks: usize },
    /// A sliding window per *query* (Mistral's and Gemma 3's mask, with StreamingLLM's
    /// sinks, `src/mask.rs`): the token at `p` sees the first `sinks` positions and the
    /// `window - sinks` up to itself, however its prompt was cut into passes. The cache
    /// keeps what a later query can still see.
    /// `codes`: what each kept row is stored as (`--kv int8+sliding`): the element
    /// and the retention are two axes, and a per-token code fits any row a window keeps.
    Sliding {
        window: usize,
        sinks: usize,
        /// Serialized beside the window: `"codes": "int8"` (and `"group"` for int4).
        #[serde(flatten)]
        codes: RowCodes,
    },
    /// Heavy-hitter oracle (Zhang et al. 2023): `budget` positions, the `recent` last ones
    /// and those with the largest accumulated attention.
    H2o { budget: usize, recent: usize },
}
// ANCHOR_END: kv_policy

// ANCHOR: row_codes
/// What each row of a per-query window is stored as: f32, or the per-token codes of
/// `--kv int8` and `--kv int4-per-token` (each row quantized on its own, so a window
/// may keep or drop it alone). KIVI's per-channel keys are not among them: a scale
/// spans `group` positions, which a window would cut through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(tag = "codes", rename_all = "kebab-case")]
pub enum RowCodes {
    #[default]
    F32,
    Int8,
    Int4PerToken {
        group: usize,
    },
}
// ANCHOR_END: row_codes

impl RowCodes {
    /// The policy that stores every position this way: `schemes`, `KvElement` and the
    /// quantized caches read their codes from it.
    pub fn policy(self) -> KvPolicy {
        match self {
            RowCodes::F32 => KvPolicy::Full,
            RowCodes::Int8 => KvPolicy::Int8,
            RowCodes::Int4PerToken { group } => KvPolicy::Int4PerToken { group },
        }
    }
}

/// The `--kv` names, in the order of the table above.
pub const POLICY_NAMES: [&str; 9] = [
    "full",
    "int8",
    "int4",
    "int4-per-token",
    "window",
    "sliding",
    "int8+sliding",
    "int4-per-token+sliding",
    "h2o",
];

/// The numbers a policy may take from the command line; each policy reads its own.
#[derive(Debug, Clone, Copy, Default)]
pub struct PolicyParams {
    /// `--window W`: recent positions a sliding window keeps.
    pub window: Option<usize>,
    /// `--sinks S`: first positions a sliding window always keeps.
    pub sinks: Option<usize>,
    /// `--budget TOKENS`: positions H2O keeps.
    pub budget: Option<usize>,
    /// `--recent R`: of H2O's budget, the most recent positions.
    pub recent: Option<usize>,
    /// `--group G`: int4 quantization group (channels, or tokens for KIVI's keys).
    pub group: Option<usize>,
}

impl KvPolicy {
    /// The policy `--kv NAME` names, with its numbers from `params`. An unknown name is
    /// an error listing the known ones.
    pub fn parse(name: &str, params: PolicyParams) -> Result<KvPolicy> {
        let group = params.group.unwrap_or(DEFAULT_GROUP);
        let policy = match name {
            "full" => KvPolicy::Full,
            "int8" => KvPolicy::Int8,
            "int4" | "int4-kivi" => KvPolicy::Int4Kivi { group },
            "int4-per-token" => KvPolicy::Int4PerToken { group },
            "window" => KvPolicy::Window {
                window: params.window.ok_or_else(|| {
                    Error::InvalidArgument(
                        "--kv window needs --window W: the recent positions to keep".into(),
                    )
                })?,
                sinks: params.sinks.unwrap_or(0),
            },
            "sliding" | "full+sliding" | "int8+sliding" | "int4-per-token+sliding" => {
                KvPolicy::Sliding {
                    window: params.window.ok_or_else(|| {
                        Error::InvalidArgument(format!(
                            "--kv {name} needs --window W: the positions each token sees"
                        ))
                    })?,
                    sinks: params.sinks.unwrap_or(0),
                    codes: match name {
                        "int8+sliding" => RowCodes::Int8,
                        "int4-per-token+sliding" => RowCodes::Int4PerToken { group },
                        _ => RowCodes::F32,
                    },
                }
            }
            "h2o" => {
                let budget = params.budget.ok_or_else(|| {
                    Error::InvalidArgument(
                        "--kv h2o needs --budget TOKENS: the positions to keep".into(),
                    )
                })?;
                KvPolicy::H2o {
                    budget,
                    recent: params.recent.unwrap_or(budget / 2),
                }
            }
            other if other.contains('+') => return Err(refuse_combination(other)),
            other => {
                return Err(Error::InvalidArgument(format!(
                    "unknown KV policy `{other}`: use one of {}",
                    POLICY_NAMES.join(", ")
                )))
            }
        };
        // An option the chosen policy does not read would be silently ignored: a learner
        // would believe `--budget 100` bounded a full cache. Refuse it instead.
        let reads: &[&str] = match policy {
            KvPolicy::Full | KvPolicy::Int8 => &[],
            KvPolicy::Int4Kivi { .. } | KvPolicy::Int4PerToken { .. } => &["--group"],
            KvPolicy::Sliding {
                codes: RowCodes::Int4PerToken { .. },
                ..
            } => &["--window", "--sinks", "--group"],
            KvPolicy::Window { .. } | KvPolicy::Sliding { .. } => &["--window", "--sinks"],
            KvPolicy::H2o { .. } => &["--budget", "--recent"],
        };
        let given = [
            ("--window", params.window.is_some()),
            ("--sinks", params.sinks.is_some()),
            ("--budget", params.budget.is_some()),
            ("--recent", params.recent.is_some()),
            ("--group", params.group.is_some()),
        ];
        if let Some((flag, _)) = given.iter().find(|(f, on)| *on && !reads.contains(f)) {
            return Err(Error::InvalidArgument(format!(
                "{flag} does nothing with --kv {name}: drop it, or pick the policy that reads it \
                 (--window/--sinks: window, sliding; --budget/--recent: h2o; --group: int4, int4-per-token, int4-per-token+sliding)"
            )));
        }
        // A window or budget that cannot work fails here, before a model loads.
        match policy {
            KvPolicy::Window { window, sinks } | KvPolicy::Sliding { window, sinks, .. } => {
                check_window(window, sinks)?
            }
            KvPolicy::H2o { budget, recent } => check_budget(budget, recent)?,
            _ => {}
        }
        Ok(policy)
    }

    /// The `--kv` name of this policy.
    pub fn name(&self) -> &'static str {
        match self {
            KvPolicy::Full => "full",
            KvPolicy::Int8 => "int8",
            KvPolicy::Int4Kivi { .. } => "int4",
            KvPolicy::Int4PerToken { .. } => "int4-per-token",
            KvPolicy::Window { .. } => "window",
            KvPolicy::Sliding { codes, .. } => match codes {
                RowCodes::F32 => "sliding",
                RowCodes::Int8 => "int8+sliding",
                RowCodes::Int4PerToken { .. } => "int4-per-token+sliding",
            },
            KvPolicy::H2o { .. } => "h2o",
        }
    }

    /// A short label with the policy's numbers, for tables and file names:
    /// `int4-g32`, `window-w256-s4`.
    pub fn label(&self) -> String {
        match *self {
            KvPolicy::Full | KvPolicy::Int8 => self.name().into(),
            KvPolicy::Int4Kivi { group } | KvPolicy::Int4PerToken { group } => {
                format!("{}-g{group}", self.name())
            }
            KvPolicy::Window { window, sinks } => format!("window-w{window}-s{sinks}"),
            KvPolicy::Sliding {
                window,
                sinks,
                codes,
            } => match codes {
                RowCodes::F32 => format!("sliding-w{window}-s{sinks}"),
                _ => format!("{}-sliding-w{window}-s{sinks}", codes.policy().label()),
            },
            KvPolicy::H2o { budget, recent } => format!("h2o-b{budget}-r{recent}"),
        }
    }

    /// True when attention sees every position exactly as computed: the full cache, whose
    /// prefill gives the same logits as token-by-token decoding (`tests/eval.rs`).
    pub fn is_exact(&self) -> bool {
        matches!(self, KvPolicy::Full)
    }

    /// The mask a per-query window lays on attention; `None` for every other policy (a
    /// per-pass window or H2O drops rows instead of masking them).
    pub fn window(&self) -> Option<Window> {
        match *self {
            KvPolicy::Sliding { window, sinks, .. } => Some(Window {
                size: window,
                sinks,
            }),
            _ => None,
        }
    }

    /// What each kept row is stored as, as the policy that stores every position that
    /// way: `int8+sliding` → `int8`; a policy that is not a composition is its own.
    pub fn element_policy(&self) -> KvPolicy {
        match *self {
            KvPolicy::Sliding { codes, .. } => codes.policy(),
            other => other,
        }
    }
}

/// Why `--kv ELEMENT+RETENTION` cannot be built, when it is not one of the compositions
/// in [`POLICY_NAMES`].
fn refuse_combination(name: &str) -> Error {
    let (element, retention) = name.split_once('+').unwrap_or((name, ""));
    let why = match (element, retention) {
        ("int4" | "int4-kivi", _) => "KIVI's keys share a scale across `group` positions, which a window cuts through: use int4-per-token+sliding".to_string(),
        (_, "window") => "a per-pass window's ring holds f32 rows: use ELEMENT+sliding (a window per query), which every layout holds in int8 or int4-per-token".to_string(),
        (_, "h2o") => "H2O's ring holds f32 rows ranked by the attention they received: use --kv h2o alone, or int8+sliding".to_string(),
        _ => format!("`{name}` is not an element (full, int8, int4-per-token) joined to a retention (sliding)"),
    };
    Error::InvalidArgument(format!(
        "--kv {name}: {why}; the compositions are {}",
        POLICY_NAMES
            .iter()
            .filter(|n| n.contains('+'))
            .copied()
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

#[cfg(test)]
mod serde_tests {
    use super::*;

    /// A composed policy says its codes beside its window, one level deep.
    #[test]
    fn a_window_of_codes_serializes_flat() {
        let int8 = KvPolicy::Sliding {
            window: 64,
            sinks: 4,
            codes: RowCodes::Int8,
        };
        let json = serde_json::to_value(int8).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"policy": "sliding", "window": 64, "sinks": 4, "codes": "int8"})
        );
        let int4 = KvPolicy::Sliding {
            window: 64,
            sinks: 0,
            codes: RowCodes::Int4PerToken { group: 16 },
        };
        let json = serde_json::to_value(int4).unwrap();
        assert_eq!(json["codes"], "int4-per-token");
        assert_eq!(json["group"], 16);
    }
}
