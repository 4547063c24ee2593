-- Argo CD health check for poolpilot.io/InferencePool, from the conditions PoolPilot writes.
local hs = {status = "Progressing", message = "waiting for PoolPilot to reconcile the pool"}
if obj.spec ~= nil and obj.spec.mode == "Off" then
  return {status = "Suspended", message = "mode is Off: PoolPilot leaves the pool alone"}
end
if obj.status == nil or obj.status.conditions == nil then
  return hs
end
if obj.status.observedGeneration ~= nil and obj.metadata.generation ~= nil
    and obj.status.observedGeneration < obj.metadata.generation then
  return {status = "Progressing", message = "PoolPilot has not seen the latest spec yet"}
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
if c.Active ~= nil and c.Active.reason == "ConflictingAutoscaler" then
  return {status = "Degraded", message = says(c.Active)}
end
if c.MetricsAvailable ~= nil and c.MetricsAvailable.status == "False" then
  return {status = "Degraded", message = says(c.MetricsAvailable)}
end
if c.BatchingApplied ~= nil and c.BatchingApplied.reason == "BatchingRolledBack" then
  return {status = "Degraded", message = says(c.BatchingApplied)}
end
if c.BatchingApplied ~= nil and c.BatchingApplied.reason == "BatchingRollingOut" then
  return {status = "Progressing", message = says(c.BatchingApplied)}
end
if c.Ready ~= nil and c.Ready.status == "True" then
  return {status = "Healthy", message = says(c.Ready)}
end
return hs
