"""What the chapters show: tables, figures and widgets, one module per book part."""
