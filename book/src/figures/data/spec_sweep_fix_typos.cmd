kvlab spec-sweep --model models/smollm2-135m-instruct --prompt-file prompts/fix-typos.txt --chat --drafters ngram,early-exit:20,bf16 --draft-lens 1,2,4,8 --max-new-tokens 48 --json
