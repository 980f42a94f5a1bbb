"""Datasets: read case files (jsonl, json, yaml, csv, directories), map golden-set shorthands, capture traces as cases."""
