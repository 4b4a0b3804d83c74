"""What runs inside the sandbox: the broker, the cell runner, the wire format, the tripwire."""
