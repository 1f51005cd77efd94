kvlab chat --model models/smollm2-135m-instruct --max-new-tokens 48 --no-reuse --json < prompts/multi_turn.txt
