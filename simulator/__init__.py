"""specbatch simulator package."""
