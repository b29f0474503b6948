"""The PyTorch side: layers, (later) families, training and ONNX export."""
