"""Qt views. Each renders a plain snapshot (numpy arrays from kvscope.engine.snapshot); none holds
or calls the engine. The application in kvscope.app feeds them on a frame timer."""
