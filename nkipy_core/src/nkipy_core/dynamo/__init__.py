"""The ``torch.compile`` front end: the dynamo backend, its use of AOTAutograd and its cache, the
specialisation of graphs with symbolic sizes and the direct call of graphs that need no wrapper."""
