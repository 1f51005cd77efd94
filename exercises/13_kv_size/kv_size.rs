//! # Exercise 13 — how big is the KV cache? (KV缓存体积估算)
//!
//! The seed article (§3.1) estimates the cache with one formula. For every layer, every
//! token stores one Key vector and one Value vector (the 2) per KV head:
//!
//! ```text
//! bytes = 2 * n_layers * n_kv_heads * head_dim * seq_len * bytes_per_elem * batch
//! ```
//!
//! A 7B Llama (32 layers, 32 heads of 128) in bf16 at 2048 tokens needs 1 GiB (the article's
//! "about 1.07 GB" is the same number in decimal units); at 32 768 tokens, 16 GiB, more than
//! the model's 14 GB of weights. Eight concurrent requests need eight caches (显存消耗就是
//! 单路的8倍). With GQA (exercise 14) the formula uses `n_kv_heads`, not `n_heads`: that is
//! exactly where GQA saves memory.
//!
//! Knowing it before allocating is the point: it decides the context length and the number of
//! concurrent requests a device can hold. kvlab's cache allocates exactly this many bytes.

/// K and V bytes one token adds to the cache, summed over all layers.
pub fn kv_bytes_per_token(
    n_layers: u64,
    n_kv_heads: u64,
    head_dim: u64,
    bytes_per_elem: u64,
) -> u64 {
    // TODO: how many vectors does one token add to each layer, and how many numbers and
    // bytes is each? Which heads count: the query heads or the KV heads?
    0
}

/// Total cache bytes for `batch` sequences of `seq_len` tokens each.
///
/// Why u64: the 7B model at 32k tokens already needs 17 GB, far past u32::MAX (4.29 GB).
pub fn kv_cache_bytes(
    n_layers: u64,
    n_kv_heads: u64,
    head_dim: u64,
    seq_len: u64,
    bytes_per_elem: u64,
    batch: u64,
) -> u64 {
    // TODO: how does the cache grow with the sequence length? With the number of requests?
    0
}

/// How many concurrent requests of `per_request_bytes` of cache fit in a device of
/// `device_bytes` once the weights (`weights_bytes`) are loaded. 0 if the weights alone
/// do not fit.
pub fn max_concurrent_requests(
    device_bytes: u64,
    weights_bytes: u64,
    per_request_bytes: u64,
) -> u64 {
    // TODO: how much memory is left for caches once the weights are loaded, and how many
    // *whole* requests fit in it? What does u64 subtraction do when the weights are larger
    // than the device (try it in a debug build)?
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    const BF16: u64 = 2;
    const F32: u64 = 4;

    #[test]
    fn llama_7b_at_2048_tokens_is_one_gib() {
        // 32 layers, 32 KV heads (no GQA), head_dim 128, bf16, one sequence.
        assert_eq!(kv_cache_bytes(32, 32, 128, 2048, BF16, 1), 1_073_741_824);
    }

    #[test]
    fn llama_7b_at_32k_tokens_outweighs_the_model() {
        let bytes = kv_cache_bytes(32, 32, 128, 32_768, BF16, 1);
        assert_eq!(bytes, 17_179_869_184);
        let weights = 7_000_000_000 * BF16; // 14 GB
        assert!(
            bytes > weights,
            "the article's point: the cache outgrows the weights"
        );
    }

    #[test]
    fn smollm2_135m_per_token() {
        // SmolLM2-135M: 30 layers, 3 KV heads (GQA 9/3), head_dim 64.
        assert_eq!(kv_bytes_per_token(30, 3, 64, BF16), 23_040);
        // A cache kept in f32 (as on CPU): twice that.
        assert_eq!(kv_bytes_per_token(30, 3, 64, F32), 46_080);
        // Its whole 8192-token context in bf16: ~189 MB, most of the 270 MB of weights.
        assert_eq!(kv_cache_bytes(30, 3, 64, 8192, BF16, 1), 188_743_680);
    }

    #[test]
    fn grows_linearly_with_length_and_batch() {
        let one = kv_cache_bytes(32, 32, 128, 2048, BF16, 1);
        assert!(one > 0);
        assert_eq!(kv_cache_bytes(32, 32, 128, 4096, BF16, 1), 2 * one);
        // eight concurrent requests: eight caches
        assert_eq!(kv_cache_bytes(32, 32, 128, 2048, BF16, 8), 8 * one);
    }

    #[test]
    fn gqa_divides_the_cache_by_the_group_size() {
        // The same 7B geometry with 8 KV heads for 32 query heads (kv_mul = 4).
        let mha = kv_cache_bytes(32, 32, 128, 4096, BF16, 1);
        let gqa = kv_cache_bytes(32, 8, 128, 4096, BF16, 1);
        assert!(gqa > 0);
        assert_eq!(mha, 4 * gqa);
    }

    #[test]
    fn concurrency_that_fits_on_an_80_gb_device() {
        let device = 80_000_000_000;
        let weights = 14_000_000_000; // 7B in bf16
        let at_4k = kv_cache_bytes(32, 32, 128, 4096, BF16, 1);
        assert_eq!(max_concurrent_requests(device, weights, at_4k), 30);
        let at_32k = kv_cache_bytes(32, 32, 128, 32_768, BF16, 1);
        assert_eq!(max_concurrent_requests(device, weights, at_32k), 3);
        // GQA with 8 KV heads: four times smaller caches, four times the requests (and a bit).
        let gqa_4k = kv_cache_bytes(32, 8, 128, 4096, BF16, 1);
        assert_eq!(max_concurrent_requests(device, weights, gqa_4k), 122);
        // Weights that do not fit leave no room at all (and must not underflow).
        assert_eq!(max_concurrent_requests(10_000_000_000, weights, at_4k), 0);
    }
}
