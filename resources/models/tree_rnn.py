# Recursive network over each input's binary tree: leaves are embedded, then every inner node is
# computed from its two children, level by level (all nodes of one height across the batch's
# trees at once). The loop runs once per level of the batch's tallest tree and each level's size
# is the batch's, so the control flow follows the input's structure.
#
# Compiled at run time as TorchScript (engine/src/zoo/tree_rnn.cpp builds the parameters); every
# method is valid Python as well.


# weight [tokens, D].
class Embed(torch.nn.Module):
    def forward(self, tokens: Tensor) -> Tensor:
        return torch.embedding(self.weight, tokens)


# w1 [2D, F], b1 [F]; w2 [F, D], b2 [D]: a node from its children.
class Compose(torch.nn.Module):
    def forward(self, left: Tensor, right: Tensor) -> Tensor:
        h = torch.relu(torch.matmul(torch.cat([left, right], 1), self.w1) + self.b1)
        return torch.tanh(torch.matmul(h, self.w2) + self.b2)


# weight [classes, D], bias [classes].
class Dense(torch.nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return torch.addmm(self.bias, x, self.weight.t())


# leaf: Embed; cell: Compose; head: Dense. Inputs as symtune::RandomTrees lays them out; returns
# logits [trees, classes] from each tree's root.
class TreeNet(torch.nn.Module):
    def forward(self, tokens: Tensor, left: Tensor, right: Tensor, order: Tensor,
                levels: List[int], roots: Tensor) -> Tensor:
        h = self.leaf.forward(tokens)
        start = 0
        for size in levels:
            ids = order[start:start + size]
            composed = self.cell.forward(h.index_select(0, left.index_select(0, ids)),
                                         h.index_select(0, right.index_select(0, ids)))
            h = h.index_copy(0, ids, composed)
            start += size
        return self.head.forward(h.index_select(0, roots))
