kvlab bench --model models/smollm2-135m-instruct --prefill 128,512 --contexts 1,512 --reps 3 --threads 1 --dtype f32 --layout rows --json
kvlab bench --model models/smollm2-135m-instruct --prefill 128,512 --contexts 1,512 --reps 3 --threads 1 --dtype f32 --json
kvlab bench --model models/smollm2-135m-instruct --prefill 128,512 --contexts 1,512 --reps 3 --threads 1 --dtype bf16 --json
kvlab bench --model models/smollm2-135m-instruct --prefill 128,512 --contexts 1,512 --reps 3 --threads 1 --dtype int8 --json
kvlab bench --model models/smollm2-135m-instruct --prefill 128,512 --contexts 1,512 --reps 3 --threads 2 --dtype f32 --layout rows --json
kvlab bench --model models/smollm2-135m-instruct --prefill 128,512 --contexts 1,512 --reps 3 --threads 2 --dtype f32 --json
kvlab bench --model models/smollm2-135m-instruct --prefill 128,512 --contexts 1,512 --reps 3 --threads 2 --dtype bf16 --json
kvlab bench --model models/smollm2-135m-instruct --prefill 128,512 --contexts 1,512 --reps 3 --threads 2 --dtype int8 --json
