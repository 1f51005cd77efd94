kvlab bench-disagg --model models/smollm2-135m-instruct --requests 12 --rate 2 --seed 0 --json
