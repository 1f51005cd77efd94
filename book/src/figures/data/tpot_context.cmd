kvlab bench-context --model models/smollm2-135m-instruct --contexts 1,1024,2048,4096,6000,8000 --reps 3 --json
kvlab bench-context --model models/gemma-3-270m --contexts 1,1024,2048,4096,6000,8000 --reps 3 --json
