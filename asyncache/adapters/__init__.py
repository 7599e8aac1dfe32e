"""What plugs into asyncache: stores (``sqlite``, ``redis``), models (``onnx``, ``torch``), metrics.

Each adapter needs an extra (``pip install 'asyncache-ml[sqlite]'``...) and is
imported from its own module, so ``import asyncache`` never pulls in a driver
or an ML library.
"""
