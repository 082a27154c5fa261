"""One module per ``tandem`` subcommand (thin shells over the pure layers)."""
