# Early-exit network: a cheap first stage and head classify every image; the later stages run only
# for the images whose early prediction is unsure (top probability under a threshold), and their
# head refines those images' logits. How much of the network runs depends on the batch in form
# only: the loss reads the sum of both heads, nothing trains the first alone, and on the zoo's data
# it stays near chance (top probability 0.13-0.19 over 400 steps of the ci preset), so every image
# runs stages 2-3 on every step (docs/benchmarks.md, "The model zoo").
#
# Compiled at run time as TorchScript (engine/src/zoo/early_exit.cpp builds the parameters); every
# method is valid Python as well.


# weight [out, in, 3, 3]; bn_weight, bn_bias [out]; buffers running_mean, running_var [out];
# attribute stride (int).
class ConvBnRelu(torch.nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        y = torch.conv2d(x, self.weight, None, [self.stride, self.stride], [1, 1])
        y = torch.batch_norm(y, self.bn_weight, self.bn_bias, self.running_mean,
                             self.running_var, self.training, 0.1, 1e-5, True)
        return torch.relu(y)


# fc_w [classes, channels], fc_b [classes]: global average pooling, then a linear layer.
class ExitHead(torch.nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return torch.addmm(self.fc_b, x.mean([2, 3]), self.fc_w.t())


# stage1, stage2, stage3: chains of ConvBnRelu; exit1, exit2: ExitHead. Attribute threshold
# (float). Returns logits [batch, classes].
class EarlyExitNet(torch.nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        h = self.stage1.forward(x)
        early = self.exit1.forward(h)
        confidence = torch.softmax(early.detach(), 1).amax(1)
        unsure = (confidence < self.threshold).nonzero().squeeze(1)
        out = early
        if unsure.numel() > 0:
            g = self.stage2.forward(h.index_select(0, unsure))
            g = self.stage3.forward(g)
            out = out.index_add(0, unsure, self.exit2.forward(g))
        return out
