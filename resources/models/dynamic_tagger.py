# Sequence tagger over sentences of different lengths: every batch is padded to its own longest
# sentence, and a GRU runs one step per position of that length (a loop whose trip count is the
# batch's), carrying each sentence's state unchanged past its end.
#
# Compiled at run time as TorchScript (engine/src/zoo/dynamic_tagger.cpp builds the parameters);
# every method is valid Python as well.


# weight [V, D]; row 0 is the padding token's.
class Embed(torch.nn.Module):
    def forward(self, tokens: Tensor) -> Tensor:
        return torch.embedding(self.weight, tokens, 0)


# w_ih [D, 3H], w_hh [H, 3H], b_ih, b_hh [3H] (gates r, z, n); attribute hidden (int).
class GRU(torch.nn.Module):
    def forward(self, x: Tensor, lengths: Tensor) -> Tensor:
        hid = self.hidden
        gi_all = torch.matmul(x, self.w_ih) + self.b_ih
        h = torch.zeros([x.size(0), hid], dtype=x.dtype, device=x.device)
        outs: List[Tensor] = []
        for t in range(x.size(1)):
            gi = gi_all[:, t]
            gh = torch.matmul(h, self.w_hh) + self.b_hh
            r = torch.sigmoid(gi[:, :hid] + gh[:, :hid])
            z = torch.sigmoid(gi[:, hid:2 * hid] + gh[:, hid:2 * hid])
            n = torch.tanh(gi[:, 2 * hid:] + r * gh[:, 2 * hid:])
            step = (1 - z) * n + z * h
            h = torch.where((lengths > t).unsqueeze(1), step, h)
            outs.append(h)
        return torch.stack(outs, 1)


# weight [tags, H + D], bias [tags]: per position, from the GRU state and the word itself.
class TagHead(torch.nn.Module):
    def forward(self, h: Tensor, x: Tensor) -> Tensor:
        features = torch.cat([h, x], 2)
        return torch.addmm(self.bias, features.reshape(-1, features.size(2)), self.weight.t())


# embed: Embed; rnn: GRU; head: TagHead. Returns tag logits [batch * max_len, tags].
class Tagger(torch.nn.Module):
    def forward(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        x = self.embed.forward(tokens)
        h = self.rnn.forward(x, lengths)
        return self.head.forward(h, x)
