"""Build a tiny random Hugging Face model folder with a locally trained tokenizer and chat template.

    python scripts/init_random_model.py --output_dir ~/models/tiny-qwen2 --hidden_size 64 --arch qwen2
"""

from hybridrl.models.tiny import main

if __name__ == "__main__":
    main()
