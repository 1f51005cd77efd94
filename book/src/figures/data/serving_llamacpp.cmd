RAYON_NUM_THREADS=2 kvlab serve --model models/smollm2-135m-instruct --dtype {f32,w8a8} --host 127.0.0.1 --port 18080
models/.cache/llamacpp/build/bin/llama-server -m smollm2-{F32,Q8_0}.gguf -t 2 -tb 2 -np N -c N*1024 --host 127.0.0.1 --port 18081
kvlab loadtest --url URL --requests 32 --concurrency N --prompt-mix short:1 --seed ROUND --json   (N in 1 4 8 16)
guidellm 0.8.1 run --backend kind=openai_http,target=URL --profile kind=concurrent,streams=N --data kind=synthetic_text,prompt_tokens=40,output_tokens=32 --tokenizer kind=huggingface_auto,model=models/smollm2-135m-instruct --constraint kind=max_requests,count=32 --output kind=json,path=FILE
