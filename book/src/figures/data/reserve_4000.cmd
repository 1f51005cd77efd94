kvlab generate --model models/smollm2-135m-instruct --chat --prompt "Say hi." --max-new-tokens 4000 --json
