collect_ignore = ["memlab/__main__.py"]
