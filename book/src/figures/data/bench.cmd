kvlab bench --model models/smollm2-135m-instruct --prefill 16,32,64,128,256,512,1024 --contexts 16,64,128,256,512,1024 --reps 3 --json
