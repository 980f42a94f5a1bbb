"""The judge: model-graded assertions ask a target for a verdict, and the verdict is read strictly."""
