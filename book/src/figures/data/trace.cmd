kvlab trace --model models/smollm2-135m-instruct --chat --prompt "Explain in a few sentences what a KV cache is." --max-new-tokens 256 --out target/figures-trace --json
