"""specbatch traces package."""
