# Transformer-XL style language model: the sequence is cut into segments that run one after the
# other, and each segment attends to a memory of the hidden states of the segments before it
# (stop-gradient, as in Transformer-XL), with a learned relative-position bias. The segment length
# and the memory length are inputs drawn per batch, so the attention shapes differ every batch.
#
# Compiled at run time as TorchScript (engine/src/zoo/transformer_xl.cpp builds the parameters);
# every method is valid Python as well (`F` is torch.nn.functional). The layers' weights are stacked along a leading layer
# dimension and the decoder loops over them.


# Per layer l (leading dimension L): ln1_w, ln1_b, ln2_w, ln2_b [L, D]; w_qkv [L, D, 3D];
# w_o [L, D, D]; w_ff1 [L, D, F], b_ff1 [L, F]; w_ff2 [L, F, D], b_ff2 [L, D];
# rel_bias [L, heads, max_rel]. Attributes: n_layers, n_heads, max_rel (int), scale (float).
class XLDecoder(torch.nn.Module):
    def forward(self, h: Tensor, mems: Tensor, mem_len: int) -> Tuple[Tensor, Tensor]:
        b = h.size(0)
        seg = h.size(1)
        d = h.size(2)
        m = mems.size(2)
        heads = self.n_heads
        hd = d // heads
        # Query i sits at position m + i of [memory; segment]; it sees keys at or before it.
        dist = (torch.arange(seg, device=h.device) + m).unsqueeze(1) - torch.arange(
            m + seg, device=h.device).unsqueeze(0)
        future = dist < 0
        rel = dist.clamp(0, self.max_rel - 1)
        new_mems: List[Tensor] = []
        for l in range(self.n_layers):
            ctx = torch.cat([mems[l], h], 1)
            keep = min(mem_len, ctx.size(1))
            new_mems.append(ctx[:, ctx.size(1) - keep:].detach())
            x = torch.layer_norm(ctx, [d], self.ln1_w[l], self.ln1_b[l], 1e-5)
            qkv = torch.matmul(x, self.w_qkv[l])
            q = qkv[:, m:, :d].reshape(b, seg, heads, hd).transpose(1, 2)
            k = qkv[:, :, d:2 * d].reshape(b, m + seg, heads, hd).transpose(1, 2)
            v = qkv[:, :, 2 * d:].reshape(b, m + seg, heads, hd).transpose(1, 2)
            scores = torch.matmul(q, k.transpose(2, 3)) * self.scale + self.rel_bias[l][:, rel]
            att = torch.softmax(scores.masked_fill(future, -1e9), -1)
            o = torch.matmul(att, v).transpose(1, 2).reshape(b, seg, d)
            h = h + torch.matmul(o, self.w_o[l])
            y = torch.layer_norm(h, [d], self.ln2_w[l], self.ln2_b[l], 1e-5)
            y = F.gelu(torch.matmul(y, self.w_ff1[l]) + self.b_ff1[l])
            h = h + torch.matmul(y, self.w_ff2[l]) + self.b_ff2[l]
        return h, torch.stack(new_mems)


# embed [V, D]; decoder: XLDecoder; lnf_w, lnf_b [D]; out_w [V, D], out_b [V].
# Attribute n_layers (int). Returns next-token logits [batch * tokens, V].
class TransformerXL(torch.nn.Module):
    def forward(self, tokens: Tensor, seg_len: int, mem_len: int) -> Tensor:
        x = torch.embedding(self.embed, tokens)
        d = x.size(2)
        mems = torch.zeros([self.n_layers, x.size(0), 0, d], dtype=x.dtype, device=x.device)
        outs: List[Tensor] = []
        for s in range(tokens.size(1) // seg_len):
            h, mems = self.decoder.forward(x[:, s * seg_len:(s + 1) * seg_len], mems, mem_len)
            outs.append(h)
        h = torch.layer_norm(torch.cat(outs, 1), [d], self.lnf_w, self.lnf_b, 1e-5)
        return torch.addmm(self.out_b, h.reshape(-1, d), self.out_w.t())
