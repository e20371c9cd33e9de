"""Accuracy on CNN/DailyMail: dataset loading, prompting, ROUGE, and output drift between runs."""
