models/.cache/llamacpp/build/bin/llama-bench -m smollm2-{F32,BF16,Q8_0}.gguf -t 2 -p 512 -n 64 -d 0,512 -r 3 -o jsonl
kvlab bench --model models/smollm2-135m-instruct --prefill 512 --contexts 32,512 --reps 5 --threads 2 --dtype {f32,bf16,bf16a,int8,w8a8} --json
