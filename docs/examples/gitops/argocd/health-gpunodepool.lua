-- Argo CD health check for poolpilot.io/GPUNodePool, from the conditions PoolPilot writes.
local hs = {status = "Progressing", message = "waiting for PoolPilot to reconcile the node pool"}
if obj.status == nil or obj.status.conditions == nil then
  return hs
end
local c = {}
for _, condition in ipairs(obj.status.conditions) do
  c[condition.type] = condition
end
local function says(cond)
  return cond.reason .. ": " .. (cond.message or "")
end
if c.Ready ~= nil and c.Ready.status == "False" then
  return {status = "Degraded", message = says(c.Ready)}
end
if c.NodesReady ~= nil and c.NodesReady.reason == "ProvisioningTimedOut" then
  return {status = "Degraded", message = says(c.NodesReady)}
end
if c.NodesReady ~= nil and c.NodesReady.status == "False" then
  return {status = "Progressing", message = says(c.NodesReady)}
end
if c.Ready ~= nil and c.Ready.status == "True" then
  return {status = "Healthy", message = says(c.Ready)}
end
return hs
