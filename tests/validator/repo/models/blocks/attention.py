from ..layers import Linear


class Attention(Linear):
    pass
