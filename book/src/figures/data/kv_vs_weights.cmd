kvlab kv-size --model models/smollm2-135m-instruct --name "SmolLM2-135M (GQA 9/3)" --seq-len 32768 --json
kvlab kv-size --layers 32 --kv-heads 32 --head-dim 128 --params 6738415616 --name "Llama-2-7B (MHA)" --seq-len 32768 --json
kvlab kv-size --layers 32 --kv-heads 8 --head-dim 128 --params 8030261248 --name "Llama-3-8B (GQA 32/8)" --seq-len 32768 --json
kvlab kv-size --model models/gemma-3-270m --name "Gemma 3 270M (MQA 4/1, hybrid)" --seq-len 32768 --json
