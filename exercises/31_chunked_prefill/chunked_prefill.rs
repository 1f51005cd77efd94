//! # Exercise 31 — a chunked-prefill step, and the stall it removes
//!
//! A long prompt (预填充, prefill) arrives while other requests are decoding (解码). If the
//! engine prefills it whole, the iteration that does so lasts as long as the whole
//! prefill, and every decoding request waits that long for its next token: a *stall*
//! in their inter-token latency. Chunked prefill (Sarathi, Agrawal et al. 2023) gives
//! each iteration a token budget: the decodes take their one row each, and the prompt
//! runs in chunks that fill what is left, one chunk per iteration. Each iteration then
//! lasts about the same, and the decodes never wait for more than one.
//!
//! A prompt's chunks are written into the KV cache one after another (KV缓存): chunk
//! `i` attends to every earlier chunk through the cache, so the result is bitwise that of
//! one whole prefill (kvlab's kernels are row-independent). Only the **last** chunk's
//! last row gives logits worth sampling: the first token (首token, TTFT).
//!
//! kvlab: `src/engine/scheduler.rs` (`prefill_chunk`), `src/engine/engine.rs` (`run_batch`),
//! chapter "Scheduling prefill and decode".

/// A prompt being prefilled: its length and how many of its tokens are in the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefill {
    pub prompt_len: usize,
    pub done: usize,
}

/// What one prefill runs in this iteration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    /// Rows of its prompt in this iteration (0: it waits).
    pub rows: usize,
    /// Whether this chunk ends the prompt, so that its last row's logits give the first token.
    pub samples: bool,
}

/// One iteration of chunked prefill: `decodes` decode rows are already in the batch, the
/// budget is `budget` rows, `prefills` are oldest first. Returns each prefill's chunk, in
/// order, and advances its `done`.
pub fn chunk_step(prefills: &mut [Prefill], decodes: usize, budget: usize) -> Vec<Chunk> {
    // TODO: Questions:
    // - Of the budget, how many rows are left once the decodes have theirs (and what if
    //   the decodes alone fill it)?
    // - How many rows of its prompt does each prefill run, oldest first, and what is left
    //   for the next one?
    // - Which chunk's logits give the first token: every chunk's, or only one?
    let _ = (decodes, budget);
    prefills
        .iter()
        .map(|_| Chunk {
            rows: 0,
            samples: false,
        })
        .collect()
}

/// Iterations a prompt of `prompt_len` tokens takes to prefill, alone among prefills,
/// with `decodes` decode rows in every iteration and a budget of `budget` rows.
pub fn iterations_to_prefill(prompt_len: usize, decodes: usize, budget: usize) -> usize {
    // TODO: how many prompt rows does one iteration run, and does a last, partial chunk
    // count as an iteration? (Which way must the division round?)
    let _ = (prompt_len, decodes, budget);
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_prompt_runs_in_chunks_beside_the_decodes() {
        let mut p = [Prefill {
            prompt_len: 1000,
            done: 0,
        }];
        let mut chunks = Vec::new();
        // (Bounded: a step that makes no progress must fail, not hang.)
        while p[0].done < 1000 && chunks.len() < 20 {
            chunks.push(chunk_step(&mut p, 4, 128)[0]);
        }
        // 124 rows per iteration (4 go to the decodes): 8 full chunks and 8 rows.
        assert_eq!(chunks.len(), 9);
        assert!(chunks[..8].iter().all(|c| c.rows == 124 && !c.samples));
        assert_eq!(
            chunks[8],
            Chunk {
                rows: 8,
                samples: true
            }
        );
        assert_eq!(iterations_to_prefill(1000, 4, 128), 9);
    }

    #[test]
    fn the_oldest_prefill_goes_first_and_the_next_gets_the_rest() {
        let mut p = [
            Prefill {
                prompt_len: 50,
                done: 20,
            },
            Prefill {
                prompt_len: 300,
                done: 0,
            },
            Prefill {
                prompt_len: 10,
                done: 0,
            },
        ];
        let chunks = chunk_step(&mut p, 2, 64);
        assert_eq!(
            chunks[0],
            Chunk {
                rows: 30,
                samples: true
            }
        );
        assert_eq!(
            chunks[1],
            Chunk {
                rows: 32,
                samples: false
            }
        );
        assert_eq!(
            chunks[2],
            Chunk {
                rows: 0,
                samples: false
            }
        );
        assert_eq!(p[0].done, 50);
        assert_eq!(p[1].done, 32);
        assert_eq!(p[2].done, 0);
    }

    #[test]
    fn a_prompt_that_fits_runs_whole_and_samples() {
        let mut p = [Prefill {
            prompt_len: 17,
            done: 0,
        }];
        assert_eq!(
            chunk_step(&mut p, 0, 512),
            vec![Chunk {
                rows: 17,
                samples: true
            }]
        );
        assert_eq!(iterations_to_prefill(17, 0, 512), 1);
        assert_eq!(iterations_to_prefill(124, 4, 128), 1);
        assert_eq!(iterations_to_prefill(125, 4, 128), 2);
    }

    #[test]
    fn decodes_that_fill_the_budget_leave_nothing() {
        let mut p = [Prefill {
            prompt_len: 5,
            done: 0,
        }];
        assert_eq!(
            chunk_step(&mut p, 8, 8),
            vec![Chunk {
                rows: 0,
                samples: false
            }]
        );
        assert_eq!(
            chunk_step(&mut p, 20, 8),
            vec![Chunk {
                rows: 0,
                samples: false
            }]
        );
        assert_eq!(p[0].done, 0);
        // A prompt already in the cache runs nothing more and samples nothing more.
        let mut p = [Prefill {
            prompt_len: 5,
            done: 5,
        }];
        let none = Chunk {
            rows: 0,
            samples: false,
        };
        assert_eq!(chunk_step(&mut p, 0, 8), vec![none]);
    }
}
