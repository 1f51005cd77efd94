kvlab record pool-f32 --model models/smollm2-135m-instruct --out book/src/replays/pool-f32.json --json
