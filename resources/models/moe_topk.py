# Mixture of experts with dynamic top-k routing: a router scores the experts for every token, and a
# token uses its best experts until their router probability adds up to a threshold (at most k_max
# of them), so both the number of experts per token and the tokens per expert vary per batch.
# Experts that no token chose do not run.
#
# Compiled at run time as TorchScript (engine/src/zoo/moe_topk.cpp builds the parameters); every
# method is valid Python as well (`F` is torch.nn.functional).


# weight [out, in], bias [out].
class Dense(torch.nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return torch.addmm(self.bias, x, self.weight.t())


# ln_w, ln_b [D]; router [D, E]; w1 [E, D, F], b1 [E, F]; w2 [E, F, D], b2 [E, D].
# Attributes n_experts, k_max (int), p_threshold (float).
class MoELayer(torch.nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        y = torch.layer_norm(x, [x.size(1)], self.ln_w, self.ln_b, 1e-5)
        probs = torch.softmax(torch.matmul(y, self.router), 1)
        top_p, top_i = torch.topk(probs, self.k_max, 1)
        use = (torch.cumsum(top_p, 1) - top_p) < self.p_threshold
        gate = top_p * use.to(top_p.dtype)
        gate = gate / gate.sum(1, keepdim=True)
        out = torch.zeros_like(x)
        for e in range(self.n_experts):
            hit = (top_i == e) & use
            rows = hit.any(1).nonzero().squeeze(1)
            if rows.numel() > 0:
                weight = (gate * hit.to(gate.dtype)).sum(1).index_select(0, rows)
                hidden = F.gelu(torch.matmul(y.index_select(0, rows), self.w1[e]) + self.b1[e])
                expert = torch.matmul(hidden, self.w2[e]) + self.b2[e]
                out = out.index_add(0, rows, expert * weight.unsqueeze(1))
        return x + out


# inp: Dense; blocks: a chain of MoELayer; head: Dense. Input [batch, tokens, features]; returns
# class logits per token [batch * tokens, classes].
class MoENet(torch.nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        h = self.inp.forward(x.reshape(-1, x.size(2)))
        h = self.blocks.forward(h)
        return self.head.forward(h)
