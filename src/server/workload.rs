//! The load test's workload: when each request arrives, how long its prompt is, how many
//! tokens it asks for; all from one seed (book: serving.md).
//!
//! Arrivals are a Poisson process: the gaps between them are exponential with mean
//! `1 / rate`, the usual model of independent users (and what vLLM's and DistServe's
//! benchmarks use). Prompts are token ids, not text, so that a "1000-token prompt" is
//! exactly 1000 tokens on any tokenizer; outputs have a fixed length (`ignore_eos`), so
//! that every policy is measured on the same amount of work.

use crate::error::{Error, Result};
use crate::rng::Rng;
use serde::Serialize;

/// A kind of request: prompt and output length ranges (inclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RequestKind {
    pub name: &'static str,
    pub prompt_tokens: (usize, usize),
    pub output_tokens: (usize, usize),
}

/// A chat turn: a short question, an answer of a few sentences.
pub const SHORT: RequestKind = RequestKind {
    name: "short",
    prompt_tokens: (20, 60),
    output_tokens: (16, 64),
};
/// A document to summarise: a long prompt whose prefill stalls every decode that
/// shares its iteration (unless it is chunked).
pub const LONG: RequestKind = RequestKind {
    name: "long",
    prompt_tokens: (900, 1100),
    output_tokens: (16, 32),
};

/// A passage to quote or edit: the prompt gives a passage twice, so a model that copies
/// goes on with it a third time, and prompt-lookup drafts find what comes next
/// (`lab::engine_speculation::copy_prompt`'s load, over HTTP).
pub const COPY: RequestKind = RequestKind {
    name: "copy",
    prompt_tokens: (160, 240),
    output_tokens: (48, 64),
};

/// Which kinds, with which weights: `short:3,long:1` is one long request in four.
#[derive(Debug, Clone, Serialize)]
pub struct PromptMix {
    pub kinds: Vec<(RequestKind, u32)>,
}

impl PromptMix {
    pub fn parse(spec: &str) -> Result<PromptMix> {
        let bad = |why: String| {
            Error::InvalidArgument(format!(
                "--prompt-mix {spec}: {why}: give kinds and weights like short:3,long:1"
            ))
        };
        let mut kinds = Vec::new();
        for item in spec.split(',') {
            let (name, weight) = item.split_once(':').unwrap_or((item, "1"));
            let kind = match name.trim() {
                "short" => SHORT,
                "long" => LONG,
                "copy" => COPY,
                other => return Err(bad(format!("unknown kind `{other}` (short, long, copy)"))),
            };
            let weight: u32 = weight
                .trim()
                .parse()
                .map_err(|_| bad(format!("`{weight}` is not a whole-number weight")))?;
            kinds.push((kind, weight));
        }
        if kinds.iter().map(|(_, w)| *w as u64).sum::<u64>() == 0 {
            return Err(bad("every weight is 0".into()));
        }
        Ok(PromptMix { kinds })
    }

    fn pick(&self, rng: &mut Rng) -> RequestKind {
        let total: u64 = self.kinds.iter().map(|(_, w)| *w as u64).sum();
        let mut x = rng.next_u64() % total;
        for (kind, w) in &self.kinds {
            if x < *w as u64 {
                return *kind;
            }
            x -= *w as u64;
        }
        self.kinds[0].0
    }
}

/// One request of the workload.
#[derive(Debug, Clone, Serialize)]
pub struct Planned {
    pub index: usize,
    pub kind: &'static str,
    /// Seconds after the start of the test.
    pub arrival_s: f64,
    pub prompt: Vec<u32>,
    pub max_tokens: usize,
}

/// Ids drawn for prompts: ordinary tokens of SmolLM2's vocabulary, clear of the special
/// ones at the start.
const PROMPT_IDS: std::ops::Range<u64> = 1000..40_000;

// ANCHOR: plan
/// `n` requests at `rate` per second on average; the same `seed` gives the same workload.
pub fn plan(n: usize, rate: f64, seed: u64, mix: &PromptMix) -> Vec<Planned> {
    let mut rng = Rng::new(seed);
    let uniform = |rng: &mut Rng| (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    let in_range = |rng: &mut Rng, (lo, hi): (usize, usize)| {
        lo + (rng.next_u64() % (hi - lo + 1) as u64) as usize
    };
    let mut t = 0.0;
    (0..n)
        .map(|index| {
            // Exponential gap: -ln(1 - u) / rate, u uniform in [0, 1).
            t += -(1.0 - uniform(&mut rng)).ln() / rate;
            let kind = mix.pick(&mut rng);
            let prompt_len = in_range(&mut rng, kind.prompt_tokens);
            let mut prompt: Vec<u32> = (0..prompt_len)
                .map(|_| {
                    (PROMPT_IDS.start + rng.next_u64() % (PROMPT_IDS.end - PROMPT_IDS.start)) as u32
                })
                .collect();
            if kind == COPY {
                // The first half again: the passage given twice.
                let half = prompt_len / 2;
                prompt.truncate(prompt_len - half);
                prompt.extend_from_within(..half);
            }
            Planned {
                index,
                kind: kind.name,
                arrival_s: t,
                prompt,
                max_tokens: in_range(&mut rng, kind.output_tokens),
            }
        })
        .collect()
}
// ANCHOR_END: plan

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_workload_and_the_mean_gap_is_one_over_the_rate() {
        let mix = PromptMix::parse("short:3,long:1").unwrap();
        let a = plan(2000, 4.0, 7, &mix);
        let b = plan(2000, 4.0, 7, &mix);
        assert_eq!(
            a.iter()
                .map(|p| (p.arrival_s, p.prompt.clone()))
                .collect::<Vec<_>>(),
            b.iter()
                .map(|p| (p.arrival_s, p.prompt.clone()))
                .collect::<Vec<_>>()
        );
        let mean_gap = a.last().unwrap().arrival_s / 2000.0;
        assert!((mean_gap - 0.25).abs() < 0.02, "{mean_gap}");
        let long = a.iter().filter(|p| p.kind == "long").count();
        assert!((400..600).contains(&long), "{long}");
        for p in &a {
            let kind = if p.kind == "long" { LONG } else { SHORT };
            assert!((kind.prompt_tokens.0..=kind.prompt_tokens.1).contains(&p.prompt.len()));
            assert!((kind.output_tokens.0..=kind.output_tokens.1).contains(&p.max_tokens));
        }
    }

    #[test]
    fn a_copy_prompt_is_one_passage_given_twice() {
        let mix = PromptMix::parse("copy:1").unwrap();
        for p in plan(50, 1.0, 3, &mix) {
            let (n, half) = (p.prompt.len(), p.prompt.len() / 2);
            assert!((COPY.prompt_tokens.0..=COPY.prompt_tokens.1).contains(&n));
            assert!((COPY.output_tokens.0..=COPY.output_tokens.1).contains(&p.max_tokens));
            assert_eq!(
                p.prompt[n - half..],
                p.prompt[..half],
                "request {}",
                p.index
            );
            // The passage itself is random ids, not a repeat of one id.
            assert!(p.prompt[..half].windows(2).any(|w| w[0] != w[1]));
        }
    }

    #[test]
    fn bad_mixes_are_refused_by_name() {
        assert!(PromptMix::parse("short:3,huge:1")
            .unwrap_err()
            .to_string()
            .contains("huge"));
        assert!(PromptMix::parse("short:x").is_err());
        assert!(PromptMix::parse("short:0").is_err());
    }
}
