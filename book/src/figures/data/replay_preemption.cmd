kvlab record preemption --model models/smollm2-135m-instruct --out book/src/replays/preemption.json --json
