class Linear:
    pass
