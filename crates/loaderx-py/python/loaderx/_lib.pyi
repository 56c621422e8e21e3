from pathlib import Path

LIB_DIR: Path

def path(stem: str) -> str: ...
