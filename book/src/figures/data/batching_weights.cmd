kvlab bench-batch --model models/smollm2-135m-instruct --concurrency 8,16 --max-tokens 32 --dtype bf16 --against f32:rows --json
